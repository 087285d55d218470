"""World states on the GPU (issue #22): save / load time, file size, and resume == never stopping, per cache kind.

For each KV cache kind (ring, paged, offload, int8) on the preset's random-weight model: generate
`--blocks` blocks, capture + write the world, continue `--more` blocks; then load the file into a fresh
pipeline and continue the same blocks; report capture, write, read and load seconds, the file's MiB and
whether every continued block is bitwise equal (and the largest difference). Prints a table, writes JSON.

    python bench/bench_world_state.py --json OUT.json                 # wan-1.3b at 480x832, bf16, one GPU
    python bench/bench_world_state.py --smoke                         # CPU check of the harness (tiny)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferix_core.clients.benchmark import PRESETS, BenchConfig, build_engine
from inferix_core.engine.world_state import (
    capture_world_state,
    load_world_state,
    model_identity,
    read_world_state,
    write_world_state,
)
from inferix_core.pipeline import BlockDiffusionPipeline

KINDS = {
    "ring": {},
    "paged": {"page_frames": 3},
    "offload": {"offload": "always", "page_frames": 3},
    "int8": {"quantization": "int8"},
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(kind: str, args: argparse.Namespace) -> dict:
    cfg = BenchConfig(preset=args.preset, device=args.device, dtype=args.dtype, window_frames=args.window,
                      sink_frames=args.sink)  # fmt: skip
    pipe, context = build_engine(cfg)
    pipe.cache_config = dataclasses.replace(pipe.cache_config, **KINDS[kind])
    p = PRESETS[args.preset]
    h, w = p["latent_height"], p["latent_width"]
    state = pipe.start_stream(context, h, w, seed=1)
    for _ in range(args.blocks):
        pipe.denoise_block(state)
    ident = model_identity(pipe.model, "bench")
    device = pipe.device
    _sync(device)
    t0 = time.perf_counter()
    world = capture_world_state(pipe, state, identity=ident)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_world_state(Path(tmp) / "w.safetensors", world)
        t2 = time.perf_counter()
        size = path.stat().st_size
        straight = [pipe.denoise_block(state).latents for _ in range(args.more)]
        t3 = time.perf_counter()
        again = read_world_state(path)
        t4 = time.perf_counter()
    other = BlockDiffusionPipeline(pipe.model, pipe.sampling, pipe.cache_config)
    resumed = load_world_state(again, other, identity=ident)
    _sync(device)
    t5 = time.perf_counter()
    out = [other.denoise_block(resumed).latents for _ in range(args.more)]
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(straight, out, strict=True))
    equal = all(torch.equal(a, b) for a, b in zip(straight, out, strict=True))
    return {"kind": kind, "preset": args.preset, "dtype": args.dtype, "blocks": args.blocks, "more": args.more,
            "window": args.window, "sink": args.sink, "file_mib": size / 2**20, "capture_s": t1 - t0,
            "write_s": t2 - t1, "read_s": t4 - t3,
            "load_s": t5 - t4, "bitwise_equal": equal, "max_abs_diff": diff}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="wan-1.3b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--window", type=int, default=12)
    ap.add_argument("--sink", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=5, help="blocks before the save (the window wraps)")
    ap.add_argument("--more", type=int, default=2, help="blocks continued after it")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny preset on the CPU (checks the harness)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.preset, args.device, args.dtype, args.blocks, args.more = "tiny", "cpu", "fp32", 3, 1
        args.window, args.sink = 6, 0
    rows = [run_case(k, args) for k in args.kinds.split(",")]
    print(f"{'kind':8} {'file MiB':>9} {'capture s':>10} {'write s':>8} {'read s':>7} {'load s':>7} {'bitwise':>8} "
          f"{'max |d|':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['kind']:8} {r['file_mib']:9.1f} {r['capture_s']:10.3f} {r['write_s']:8.3f} {r['read_s']:7.3f} "
              f"{r['load_s']:7.3f} "
              f"{r['bitwise_equal']!s:>8} {r['max_abs_diff']:9.2e}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name() if args.device == "cuda"
                                               else "cpu", "rows": rows}, indent=1))  # fmt: skip
    return 0 if all(r["bitwise_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
