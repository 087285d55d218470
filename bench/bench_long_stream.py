"""Per-block time over a long stream with a sliding window + sink: is it flat, and is memory bounded?

Random-weight Wan 1.3B at 480×832 (the `inferix bench` preset), window 21 + sink 3 latent frames,
3-frame blocks, 4 steps + context pass, bf16. A short warm-up stream first (compilation, cuDNN plans),
then one long stream timed per block with CUDA events. "Flat" is judged on the blocks after the
window is full: spread (p95 / p5), and the median of the last minute of video over the first.

    PYTHONPATH=. python bench/bench_long_stream.py --minutes 10 --compile --json long_stream.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from inferix_core.clients.benchmark import PRESETS, BenchConfig, BlockTimer, build_engine
from inferix_core.pipeline import GenerationRequest

FPS_VIDEO = 16  # Wan's frame rate: a latent frame is 4 video frames


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="video length of the timed stream")
    p.add_argument("--window", type=int, default=21)
    p.add_argument("--sink", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--preset", default="wan-1.3b", choices=sorted(PRESETS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    preset = PRESETS[args.preset]
    block_frames = 3
    pipe, context = build_engine(BenchConfig(
        preset=args.preset, device=args.device, dtype="bf16" if cuda else "fp32", block_frames=block_frames,
        window_frames=args.window, sink_frames=args.sink, compile=args.compile,
    ))  # fmt: skip
    h, w = preset["latent_height"], preset["latent_width"]
    warm_blocks = args.window // block_frames + 2  # fills the window once, so every shape has been seen
    for _ in pipe.stream(GenerationRequest(warm_blocks, h, w, context, seed=0)):
        pass
    video_frames = int(args.minutes * 60 * FPS_VIDEO)
    num_blocks = max(warm_blocks + 2, -(-(video_frames - 1) // (4 * block_frames)))
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    timer = BlockTimer(cuda)
    t0 = time.perf_counter()
    for _ in pipe.stream(GenerationRequest(num_blocks, h, w, context, seed=1), timer):
        pass
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    blocks = timer.seconds()
    full = blocks[args.window // block_frames :]  # once the window is full
    per_minute = max(1, int(60 * FPS_VIDEO / (4 * block_frames)))  # blocks per minute of video
    first, last = statistics.median(full[:per_minute]), statistics.median(full[-per_minute:])
    result = {
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "compile": args.compile,
        "window": args.window,
        "sink": args.sink,
        "blocks": num_blocks,
        "video_minutes": (1 + 4 * (num_blocks * block_frames - 1)) / FPS_VIDEO / 60,
        "wall_s": wall,
        "median_block_s": statistics.median(full),
        "p5_block_s": percentile(full, 0.05),
        "p95_block_s": percentile(full, 0.95),
        "max_block_s": max(full),
        "first_minute_median_s": first,
        "last_minute_median_s": last,
        "last_over_first": last / first,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "block_s": blocks,
    }
    rows = [(k, v) for k, v in result.items() if k != "block_s"]
    for k, v in rows:
        print(f"{k:<22} {v:.4f}" if isinstance(v, float) else f"{k:<22} {v}")
    print(
        f"spread p95/p5 {result['p95_block_s'] / result['p5_block_s']:.3f}; last/first minute {result['last_over_first']:.3f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
