"""Many streams and forks on one GPU: batched per block step vs one after another.

Random-weight Wan 1.3B at 480×832 (`inferix_core.clients.benchmark.build_engine`, the `inferix bench` preset),
3-frame blocks, 4 steps + context pass, bf16, transformer only (no VAE). Two questions:

1. N = 1, 2, 4, 8 independent streams (each its own prompt and seed), `--blocks` blocks each: batched
   (`pipeline.batched.denoise_streams`, one batch per transformer call, pages in one arena) vs the same
   N streams run one after another with the plain pipeline. Aggregate FPS (all streams' video frames
   over the wall time), per-stream FPS (what one viewer sees) and peak device memory.
2. `--forks` futures from one state after `--fork-past` blocks (`branching.Branches`, pages of the past
   shared copy-on-write), `--fork-blocks` blocks each, vs `--forks` separate runs of past + future.
   Time, peak memory and the KV pages held, beside the memory planner's count for the N futures
   (`branching.plan_futures`: planned pages vs the arena's peak, planned GiB vs the measured peak).

Video frames are 4 per latent frame (Wan's VAE), at 16 fps.

    PYTHONPATH=. python bench/bench_streams.py --json streams.json                       # H200
    PYTHONPATH=. python bench/bench_streams.py --preset tiny --device cpu --streams 1,2 \\
        --blocks 2 --forks 2 --fork-past 1 --fork-blocks 1 --warmup 0                      # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from inferix_core.clients.benchmark import PRESETS, BenchConfig, build_engine
from inferix_core.clients.branching import Branches, Future, new_arena, plan_futures, release_stream, start_stream
from inferix_core.pipeline.batched import denoise_streams

VIDEO_FRAMES_PER_LATENT = 4


class _Clock:
    """Wall time and peak device memory of a span (synchronised on CUDA)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.t0
        self.peak_gib = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None


def _prompts(context: torch.Tensor, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [context] + [torch.randn(context.shape, generator=g).to(context) for _ in range(n - 1)]


def bench_streams(pipe, context, h, w, n: int, blocks: int, device) -> dict:
    prompts = _prompts(context, n)
    bf = pipe.sampling.block_frames
    frames = blocks * bf * VIDEO_FRAMES_PER_LATENT  # per stream
    arena = new_arena(pipe, h, w, streams=n, max_frames=blocks * bf)
    with _Clock(device) as batched:
        states = [start_stream(pipe, prompts[i], h, w, seed=i, arena=arena) for i in range(n)]
        for _ in range(blocks):
            denoise_streams(pipe, states)
    kv_gib = arena.stats()["used_bytes"] / 2**30
    for s in states:
        release_stream(s)
    del arena, states
    seq_seconds, seq_peak = [], []
    for i in range(n):
        with _Clock(device) as one:
            state = pipe.start_stream(prompts[i], h, w, seed=i, max_frames=blocks * bf)
            for _ in range(blocks):
                pipe.denoise_block(state)
        del state
        seq_seconds.append(one.seconds)
        seq_peak.append(one.peak_gib)
    total = sum(seq_seconds)
    return {
        "streams": n,
        "blocks": blocks,
        "batched_s": batched.seconds,
        "batched_fps": n * frames / batched.seconds,
        "batched_fps_per_stream": frames / batched.seconds,
        "batched_peak_gib": batched.peak_gib,
        "batched_kv_gib": kv_gib,
        "sequential_s": total,
        "sequential_fps": n * frames / total,
        "sequential_fps_per_stream": frames / (total / n),
        "sequential_peak_gib": None if seq_peak[0] is None else max(seq_peak),
        "speedup": total / batched.seconds,
    }


def bench_forks(pipe, context, h, w, forks: int, past: int, future: int, device) -> dict:
    prompts = _prompts(context, forks + 1)
    bf = pipe.sampling.block_frames
    with _Clock(device) as branched:
        arena = new_arena(pipe, h, w, streams=forks + 1, max_frames=(past + future) * bf)
        parent = start_stream(pipe, prompts[0], h, w, seed=0, arena=arena)
        for _ in range(past):
            pipe.denoise_block(parent)
        t_past = time.perf_counter()
        plan = plan_futures(pipe, parent, forks, future)  # the planner's count of what the forks will hold
        arena.pool.peak_used = arena.pool.num_used_pages
        branches = Branches(pipe, parent, [Future(context=prompts[i + 1], seed=i + 1) for i in range(forks)])
        branches.run(future)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_future = time.perf_counter() - t_past
    stats = branches.stats()
    peak_pages = arena.pool.peak_used
    branches.keep()
    release_stream(parent)
    del branches, parent, arena
    with _Clock(device) as separate:
        for i in range(forks):
            state = pipe.start_stream(prompts[0], h, w, seed=0, max_frames=(past + future) * bf)
            for _ in range(past):
                pipe.denoise_block(state)
            pipe.set_prompt(state, prompts[i + 1])
            for _ in range(future):
                pipe.denoise_block(state)
            del state
    page_gib = stats["page_bytes"] / 2**30
    cfg = pipe.cache_config
    held = (past + future) * bf if cfg.is_global else min(cfg.window_frames, (past + future) * bf)
    pages_separate = forks * -(-held // (cfg.page_frames or bf))  # each run's frames, in pages of the same size
    return {
        "forks": forks,
        "past_blocks": past,
        "future_blocks": future,
        "branched_s": branched.seconds,
        "branched_future_s": t_future,
        "branched_peak_gib": branched.peak_gib,
        "branched_kv_pages": stats["used_pages"],
        "branched_kv_gib": stats["used_pages"] * page_gib,
        "page_copies": stats["page_copies"],
        "planned_kv_pages": plan.num_pages,  # the past once + N × one future's own pages (plan_forks)
        "peak_kv_pages": peak_pages,  # the most pages the arena held while the futures ran
        "planned_gib": plan.total_bytes / 2**30,  # weights + N-batch activations + KV, vs branched_peak_gib
        "separate_s": separate.seconds,
        "separate_peak_gib": separate.peak_gib,
        "separate_kv_pages": pages_separate,  # what the separate runs' caches hold, all kept at once
        "separate_kv_gib": pages_separate * page_gib,
        "speedup": separate.seconds / branched.seconds,
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def table(rows: list[dict], keys: list[str]) -> str:
    widths = [max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys]
    lines = ["  ".join(k.rjust(wd) for k, wd in zip(keys, widths))]
    lines += ["  ".join(_fmt(r[k]).rjust(wd) for k, wd in zip(keys, widths)) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="wan-1.3b", choices=sorted(PRESETS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None, help="bf16 on CUDA, fp32 elsewhere unless given")
    p.add_argument("--streams", default="1,2,4,8", help="comma-separated stream counts")
    p.add_argument("--blocks", type=int, default=7, help="blocks per stream (7 × 3 latent frames = 81 video frames)")
    p.add_argument("--window", type=int, default=-1, help="KV window in latent frames (-1: global)")
    p.add_argument("--sink", type=int, default=0)
    p.add_argument("--forks", type=int, default=4)
    p.add_argument("--fork-past", type=int, default=4, help="blocks of common past before the fork")
    p.add_argument("--fork-blocks", type=int, default=3, help="blocks of each future")
    p.add_argument("--warmup", type=int, default=1, help="untimed batched blocks per stream count first")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    counts = [int(c) for c in args.streams.split(",") if c.strip()]
    pipe, context = build_engine(BenchConfig(
        preset=args.preset, device=args.device, dtype=dtype, window_frames=args.window, sink_frames=args.sink,
        compile=args.compile,
    ))  # fmt: skip
    preset = PRESETS[args.preset]
    h, w = preset["latent_height"], preset["latent_width"]
    for n in counts if args.warmup else []:  # each batch size's kernels (and compiled graphs) once
        bench_streams(pipe, context, h, w, n, args.warmup, device)
    stream_rows = [bench_streams(pipe, context, h, w, n, args.blocks, device) for n in counts]
    fork_row = bench_forks(pipe, context, h, w, args.forks, args.fork_past, args.fork_blocks, device)
    result = {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "preset": args.preset,
        "dtype": dtype,
        "latent_size": [h, w],
        "window": args.window,
        "sink": args.sink,
        "compile": args.compile,
        "streams": stream_rows,
        "forks": fork_row,
    }
    print(f"{args.preset} {dtype} on {result['gpu']}, latents {h}×{w}, window {args.window}")
    print("\nN streams, batched per block vs one after another (video frames/s)")
    print(table(stream_rows, ["streams", "batched_fps", "batched_fps_per_stream", "sequential_fps",
                              "sequential_fps_per_stream", "speedup", "batched_peak_gib", "sequential_peak_gib"]))  # fmt: skip
    print(f"\n{args.forks} forks from one state vs {args.forks} separate runs")
    print(table([fork_row], ["forks", "branched_s", "separate_s", "speedup", "branched_peak_gib", "planned_gib",
                             "separate_peak_gib", "branched_kv_gib", "separate_kv_gib", "page_copies",
                             "planned_kv_pages", "peak_kv_pages"]))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
