"""Sequence-parallel benchmark: 1 GPU against N GPUs (Ulysses), per resolution, in one torchrun job.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 bench/bench_parallel.py \
        --resolutions 480x832,720x1280 --json out/parallel.json
    torchrun --standalone --nproc-per-node 2 bench/bench_parallel.py --tiny --device cpu   # CPU smoke test (gloo)

Protocol (as `inferix bench`): random-weight Wan 2.1 T2V 1.3B (seed 0, identical on every rank), 21 latent
frames (81 pixel frames) in 3-frame blocks, 4 steps + the context pass, batch 1, warm-up then timed
repeats, medians. For each resolution:
  1. the 1-GPU baseline runs on rank 0 alone (sequence parallelism off) while the other ranks wait;
  2. the same model runs on all N ranks with sequence parallelism;
then the report gives FPS (pixel frames / denoising wall time), first-block latency, peak memory on every
GPU, speed-up, scaling efficiency (speed-up / N), and how far the N-rank latents are from the 1-GPU
latents of the same seed (bf16: a few 1e-2 is rounding-order noise compounded over 7 blocks).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferix_core import parallel
from inferix_core.cache import KVCacheConfig
from inferix_core.clients.benchmark import PRESETS
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.parallel.sp_transformer import DISABLE_ENV
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="the tiny CPU-sized model (smoke test)")
    p.add_argument(
        "--resolutions", default=None, help="pixel HxW list (default 480x832,720x1280; with --tiny 64x96,96x160)"
    )
    p.add_argument("--latent-frames", type=int, default=21, help="latent frames (21 -> 81 pixel frames)")
    p.add_argument("--dtype", default=None, choices=list(DTYPES), help="default bf16 (fp32 with --tiny)")
    p.add_argument("--device", default="cuda", help="cuda (NCCL) or cpu (gloo)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=int, default=-1, help="KV window in latent frames (-1 = global)")
    p.add_argument("--sink", type=int, default=0)
    p.add_argument("--attention", default="sdpa")
    p.add_argument("--skip-baseline", action="store_true", help="only the N-rank run")
    p.add_argument("--json", type=Path, help="write the full result here (rank 0)")
    args = p.parse_args(argv)
    args.resolutions = args.resolutions or ("64x96,96x160" if args.tiny else "480x832,720x1280")
    args.dtype = args.dtype or ("fp32" if args.tiny else "bf16")
    return args


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_runs(model, args, lat_h: int, lat_w: int, device: torch.device) -> dict:
    """Warm-up + repeats of the whole stream; medians, first-block latency, peak memory, seed-0 latents."""
    dtype = DTYPES[args.dtype]
    sampling = SamplingConfig(block_frames=3)
    pipe = BlockDiffusionPipeline(model, sampling, KVCacheConfig(window_frames=args.window, sink_frames=args.sink))
    cfg = model.config
    gen = torch.Generator().manual_seed(1)
    context = torch.randn(1, cfg.text_len, cfg.text_dim, generator=gen).to(device, dtype)
    num_blocks = args.latent_frames // sampling.block_frames
    totals, firsts, latents = [], [], None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for r in range(args.warmup + args.repeats):
        sync(device)
        t0 = time.perf_counter()
        first, outs = None, []
        for out in pipe.stream(GenerationRequest(num_blocks, lat_h, lat_w, context, seed=0)):
            outs.append(out.latents)
            if first is None:
                sync(device)
                first = time.perf_counter() - t0
        sync(device)
        total = time.perf_counter() - t0
        if r >= args.warmup:
            totals.append(total)
            firsts.append(first)
        if r == 0:
            latents = torch.cat(outs, dim=1).float().cpu()
    pixel_frames = 1 + 4 * (num_blocks * sampling.block_frames - 1)
    med = statistics.median(totals)
    return {
        "median_total_s": med,
        "fps": pixel_frames / med,
        "median_first_block_s": statistics.median(firsts),
        "totals_s": totals,
        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "kv_cache_heads": pipe.kv_cache.spec.num_heads,
        "latents": latents,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = parallel.init_distributed(args.device)
    rank = parallel.get_rank()
    device = parallel.local_device(args.device)
    preset = PRESETS["tiny" if args.tiny else "wan-1.3b"]
    results = {
        "world_size": world,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "resolutions": {},
    }
    with parallel.fail_together():
        for res in args.resolutions.split(","):
            height, width = (int(v) for v in res.lower().split("x"))
            lat_h, lat_w = height // 8, width // 8
            torch.manual_seed(0)
            with device:
                model = CausalWanTransformer(preset["config"]).to(DTYPES[args.dtype]).eval().requires_grad_(False)
            if args.attention != "sdpa":
                from inferix_core.models.registry import set_attention_backend

                set_attention_backend(model, args.attention)
            entry: dict = {"latent": [lat_h, lat_w], "frame_tokens": model.config.frame_tokens(lat_h, lat_w)}
            # 1. one GPU: rank 0 alone, sequence parallelism off
            base = None
            if not args.skip_baseline:
                if rank == 0:
                    os.environ[DISABLE_ENV] = "0"
                    try:
                        base = timed_runs(model, args, lat_h, lat_w, device)
                    finally:
                        del os.environ[DISABLE_ENV]
                if world > 1:
                    dist.barrier()
            # 2. all ranks, sequence parallel
            many = None
            if world > 1:
                parallel.enable_sequence_parallel(model)
                many = timed_runs(model, args, lat_h, lat_w, device)
                peaks = [None] * world
                dist.all_gather_object(peaks, many["peak_gib"])
                many["peak_gib_per_rank"] = peaks
                parallel.disable_sequence_parallel(model)
            if rank == 0:
                if base is not None:
                    entry["1_gpu"] = {k: v for k, v in base.items() if k != "latents"}
                if many is not None:
                    entry[f"{world}_gpu"] = {k: v for k, v in many.items() if k != "latents"}
                if base is not None and many is not None:
                    diff = (many["latents"] - base["latents"]).abs()
                    speedup = base["median_total_s"] / many["median_total_s"]
                    entry["speedup"] = speedup
                    entry["scaling_efficiency"] = speedup / world
                    entry["first_block_speedup"] = base["median_first_block_s"] / many["median_first_block_s"]
                    entry["latents_max_abs_diff"] = diff.max().item()
                    entry["latents_mean_abs_diff"] = diff.mean().item()
                    entry["latents_first_block_max_abs_diff"] = diff[:, :3].max().item()
                    entry["latents_cosine"] = torch.nn.functional.cosine_similarity(
                        many["latents"].flatten(), base["latents"].flatten(), dim=0
                    ).item()
                results["resolutions"][res] = entry
                print(format_entry(res, entry, world), flush=True)
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if rank == 0 and args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def format_entry(res: str, e: dict, world: int) -> str:
    rows = [f"== {res} (latents {e['latent'][0]}x{e['latent'][1]}, {e['frame_tokens']} tokens/frame) =="]
    for name in ("1_gpu", f"{world}_gpu"):
        if name in e:
            r = e[name]
            peak = r.get("peak_gib_per_rank") or [r["peak_gib"]]
            mem = " / ".join("-" if p is None else f"{p:.2f}" for p in peak)
            rows.append(
                f"{name:>6}: {r['fps']:7.2f} FPS  total {r['median_total_s']:.3f} s  "
                f"first block {r['median_first_block_s']:.3f} s  peak GiB per GPU {mem}"
            )
    if "speedup" in e:
        rows.append(
            f"speed-up {e['speedup']:.2f}x (efficiency {e['scaling_efficiency']:.0%}), first block "
            f"{e['first_block_speedup']:.2f}x; latents vs 1 GPU: max |d| {e['latents_max_abs_diff']:.2e}, "
            f"mean |d| {e['latents_mean_abs_diff']:.2e}, first block max |d| "
            f"{e['latents_first_block_max_abs_diff']:.2e}, cosine {e['latents_cosine']:.6f}"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
