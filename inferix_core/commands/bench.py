"""`inferix bench`: the fixed engine benchmark protocol (random weights), table + JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark the engine with random weights (table + JSON)")
    p.add_argument(
        "--preset",
        default="wan-1.3b",
        help="model size and resolution: wan-1.3b (480x832), wan-14b (the Wan 2.1 14B shape with this protocol's "
        "sampling), 14b (the same shape sampled as Krea Realtime 14B: 5 steps, KV recompute of 3 frames; 14B needs an "
        "80+ GiB GPU unless --gpu-memory plans block swap), wan-5b (Wan 2.2 TI2V-5B, 704x1280), tiny, tiny-5b (CPU)",
    )
    p.add_argument(
        "--latent-frames", type=int, default=None, help="latent frames (default: the preset's; 21 -> 81 pixel frames)"
    )
    p.add_argument("--block-frames", type=int, default=None, help="latent frames per block (default: the preset's)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=int, default=-1, help="KV window in latent frames (-1 = global)")
    p.add_argument("--sink", type=int, default=0, help="sink frames")
    p.add_argument(
        "--attention",
        default="auto",
        help="auto (the loader's default: flash_attn_4 where the fa4 extra imports, else sdpa), sdpa, sdpa_cudnn "
        "(cuDNN kernel first), flash_attn, or flash_attn_4 (the fa4 extra: FlashAttention-4 where its measured "
        "table says it is faster, SDPA elsewhere)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each transformer block (fused elementwise)")
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="capture each transformer call shape (all blocks of one step) as a CUDA graph and replay it",
    )
    p.add_argument(
        "--vae-decode",
        action="store_true",
        help="stream-decode every block with the Wan VAE, with the decode options load_world_model gives on this "
        "device (CUDA: VAEDecodeOptions.fast(), compiled with --compile)",
    )
    p.add_argument("--vae-reference", action="store_true", help="with --vae-decode: the reference decode path instead")
    p.add_argument(
        "--vae-fast",
        action="store_true",
        help="with --vae-decode: the Wan VAE's VAEDecodeOptions.fast() on any device (CUDA gets it by default)",
    )
    p.add_argument(
        "--overlap-decode", action="store_true", help="decode on a side CUDA stream while the next block denoises"
    )
    p.add_argument(
        "--fp8",
        action="store_true",
        help="transformer-block linears in fp8 e4m3 (torch._scaled_mm on CUDA ≥ 8.9, an explicit emulation elsewhere)",
    )
    p.add_argument(
        "--fp8-weights", action="store_true", help="block linears stored in fp8 e4m3, dequantized per call (bf16 GEMMs)"
    )
    p.add_argument(
        "--resident-blocks",
        type=int,
        help="block swap: keep this many transformer blocks on the GPU and stream the rest from host memory",
    )
    p.add_argument(
        "--gpu-memory",
        type=float,
        metavar="GB",
        help="emulate a card of this many GiB (per-process memory cap); block swap is planned to fit it",
    )
    p.add_argument(
        "--variants",
        help="comma list of levers to run one after another on top of the other flags, parts joined with + "
        "(e.g. eager,graphs,compile,compile+graphs; parts: eager, cudnn, compile, graphs, fa4, fp8, vaefast, "
        "vaeref, vaerelease, vaeframe, taehv, reduceoverhead); prints one line per variant",
    )
    p.add_argument("--json", type=Path, help="write the full result here (a taken name gets the next number)")
    p.add_argument("--force", action="store_true", help="let --json replace an existing file")
    p.set_defaults(func=run)


def bench_config(args: argparse.Namespace):
    """The BenchConfig these flags ask for (flags left out keep BenchConfig's defaults, the loader's on CUDA)."""
    from ..clients.benchmark import PRESETS, BenchConfig
    from ..errors import ConfigError

    if args.preset not in PRESETS:
        raise ConfigError(f"unknown preset '{args.preset}'; expected one of {', '.join(PRESETS)}")
    return BenchConfig.for_preset(
        args.preset, latent_frames=args.latent_frames, block_frames=args.block_frames, dtype=args.dtype, device=args.device,
        warmup=args.warmup, repeats=args.repeats, window_frames=args.window, sink_frames=args.sink,
        attention=args.attention, vae_decode=args.vae_decode, overlap_decode=args.overlap_decode,
        compile=args.compile, fp8=args.fp8, resident_blocks=args.resident_blocks, gpu_memory_gb=args.gpu_memory,
        fp8_weights=args.fp8_weights, cuda_graphs=args.cuda_graphs,
        vae_fast=True if args.vae_fast else False if args.vae_reference else None,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from ..clients.benchmark import run_engine_benchmark, variant_options
    from ..clients.benchmark_report import format_table, format_variants

    if args.variants:
        base = bench_config(args)
        options = [(name, variant_options(name)) for name in args.variants.split(",")]  # all checked first
        results = []
        for name, opts in options:
            results.append((name, run_engine_benchmark(dataclasses.replace(base, **opts))))
            print(f"{name}: {results[-1][1]['median_total_s']:.3f} s", flush=True)
        print(format_variants(results))
        result = {"variants": [{"variant": name, **r} for name, r in results]}
    else:
        result = run_engine_benchmark(bench_config(args))
        print(format_table(result))
    if args.json:
        from ..sinks.paths import write_text_output

        print(f"wrote {write_text_output(args.json, json.dumps(result, indent=2), force=args.force)}")
    return 0
