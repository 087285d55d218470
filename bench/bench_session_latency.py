"""How soon an interactive session's frames reach its sinks, against how long each step takes (issue #19).

`InteractiveSession.step()` denoises a block, decodes it and hands it to the sinks, and only then writes the
block's clean K/V (the context pass, `pipe.settle`), so frames come out one transformer call sooner than the
step ends. This measures both per step on the protocol's random-weight Wan 1.3B (`inferix bench`'s model and
levers), the Wan VAE decoding as `load_world_model` sets it up: `frames_s` (step start → the first write to a
sink, frames on the host) and `step_s` (step start → return). One warm-up session first (compiles), then a
timed one of the same length; medians over its steps after the first.

    PYTHONPATH=. python bench/bench_session_latency.py [--variant compile+graphs+fa4] [--blocks 7] --json s.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from inferix_core.clients.benchmark import PRESETS, BenchConfig, bench_decoder, build_engine, variant_options
from inferix_core.clients.session import InteractiveSession
from inferix_core.models.registry import WorldModel
from inferix_core.sinks.base import FrameSink


class TimingSink(FrameSink):
    """Records when each write arrives (frames are on the host by then)."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, float, int]] = []  # (block, perf_counter, frames)

    def write(self, frames, block_index: int) -> None:
        self.writes.append((block_index, time.perf_counter(), len(frames)))

    def close(self) -> None:
        self.closed = True


def run_session(world: WorldModel, context: torch.Tensor, blocks: int, height: int, width: int) -> list[dict]:
    sink = TimingSink()
    session = InteractiveSession(world, prompt=context, width=width, height=height, sinks=[sink])
    steps = []
    for _ in range(blocks):
        start = len(sink.writes)
        t0 = time.perf_counter()
        block = session.step()
        t1 = time.perf_counter()
        if block is None or len(sink.writes) == start:
            raise RuntimeError("a session step gave no frames to its sink")
        first = sink.writes[start][1]
        steps.append({"step_s": t1 - t0, "frames_s": first - t0, "frames": sum(w[2] for w in sink.writes[start:])})
    session.close()
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="compile", help="levers as in `inferix bench --variants` (joined with +)")
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--preset", default="wan-1.3b", help="a bench preset (a small one runs on the CPU)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    cfg = BenchConfig(
        preset=args.preset, device=args.device, dtype=dtype, vae_decode=True, **variant_options(args.variant)
    )
    preset = PRESETS[cfg.preset]
    pipe, context = build_engine(cfg)
    vae = bench_decoder(cfg, preset, torch.device(cfg.device), next(pipe.model.parameters()).dtype)
    world = WorldModel(
        "self_forcing", preset["config"], pipe.sampling, pipe.cache_config, pipe.model, vae,
        default_context=context, source="random weights (bench protocol)",
    )  # fmt: skip
    h, w = preset["latent_height"] * 8, preset["latent_width"] * 8
    with torch.no_grad():
        run_session(world, context, args.blocks, h, w)  # warm-up (compiles)
        steps = run_session(world, context, args.blocks, h, w)
    later = steps[1:] or steps
    result = {
        "variant": args.variant,
        "blocks": args.blocks,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "steps": steps,
        "first_frames_s": steps[0]["frames_s"],
        "first_step_s": steps[0]["step_s"],
        "median_frames_s": statistics.median(s["frames_s"] for s in later),
        "median_step_s": statistics.median(s["step_s"] for s in later),
    }
    result["median_earlier_s"] = result["median_step_s"] - result["median_frames_s"]
    print(f"session, {args.variant}, {args.blocks} steps at {w}x{h}: first step frames at {steps[0]['frames_s']:.3f} s "
          f"(step {steps[0]['step_s']:.3f} s); later steps frames at {result['median_frames_s']:.3f} s, step "
          f"{result['median_step_s']:.3f} s: frames {result['median_earlier_s']:.3f} s before the step ends")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
