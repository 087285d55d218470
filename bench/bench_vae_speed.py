"""Wan VAE streaming decode, every `VAEDecodeOptions` variant side by side in one process (issue #10).

The real Wan 2.1 VAE architecture (dim 96, random weights: timing does not depend on them) decodes blocks
of 3 latent frames (12 pixel frames) at 480x832 through a stream session, as the pipeline does. Every
variant runs on its own copy of the same weights (channels-last converts weights in place), warms up in a
separate session (first and later blocks have different shapes; cuDNN autotuning and torch.compile happen
there), then decodes all blocks in a fresh session timed with CUDA events. Each variant's frames are
compared with the baseline's, block by block. The decoder's MACs per block are counted from the layer
shapes (a meta-device decode with hooks on every conv and the attention), so achieved TFLOP/s shows how
far the decode is from the tensor-core floor.

    PYTHONPATH=. python bench/bench_vae_speed.py --json bench_vae_speed.json    # H200, bf16, 480x832
    PYTHONPATH=. python bench/bench_vae_speed.py --device cpu --small           # CPU smoke test (seconds)
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict

import torch
from torch import Tensor, nn

from inferix_core.vae import VAEDecodeOptions, WanVAE, WanVAEConfig
from inferix_core.vae.layers import AttentionBlock

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# H100/H200 SXM dense bf16/fp16 tensor-core peak (the spec sheet's 1979 TFLOP/s is with 2:4 sparsity).
H200_DENSE_BF16_TFLOPS = 989.4

VARIANTS: dict[str, VAEDecodeOptions] = {
    "baseline": VAEDecodeOptions(),
    "cudnn_benchmark": VAEDecodeOptions(cudnn_benchmark=True),
    "channels_last": VAEDecodeOptions(channels_last=True),
    "channels_last+cudnn_bench": VAEDecodeOptions(channels_last=True, cudnn_benchmark=True),
    "fused_cache": VAEDecodeOptions(fused_cache=True),
    "subpixel_upsample": VAEDecodeOptions(subpixel_upsample=True),
    "all_eager": VAEDecodeOptions.fast(),
    "all_compiled": VAEDecodeOptions.fast(compile=True),
}


def count_decode_macs(cfg: WanVAEConfig, block_frames: int, height: int, width: int) -> dict[str, float]:
    """Multiply-accumulates of `conv2` + decoder for the first and a later block, from a meta-device decode.

    Counted at the reference formula (nearest upsample then 3x3 conv), so every variant is rated on the same
    work; the sub-pixel upsample really does fewer. Convs: output elements · in_channels/groups · kernel
    volume. Attention: QKᵀ and AV, 2 · (B·T) · (HW)² · C.
    """
    with torch.device("meta"):
        vae = WanVAE(cfg)
    s = cfg.spatial_compression
    z = torch.zeros(1, cfg.z_dim, block_frames, height // s, width // s, device="meta")
    tally: dict[str, float] = {}

    def conv_hook(module: nn.Module, _inputs: tuple, out: Tensor) -> None:
        kernel = 1
        for k in module.kernel_size:
            kernel *= k
        kind = f"conv{len(module.kernel_size)}d_k{'x'.join(map(str, module.kernel_size))}"
        tally[kind] = tally.get(kind, 0.0) + out.numel() * (module.in_channels // module.groups) * kernel

    def attn_hook(_module: nn.Module, inputs: tuple, _out: Tensor) -> None:
        B, C, T, H, W = inputs[0].shape
        tally["attention"] = tally.get("attention", 0.0) + 2.0 * B * T * (H * W) ** 2 * C

    handles = []
    for module in (vae.conv2, *vae.decoder.modules()):
        if isinstance(module, nn.Conv3d | nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, AttentionBlock):
            handles.append(module.register_forward_hook(attn_hook))
    session = vae.stream_decoder()
    session.decode(z)
    first = dict(tally)
    tally.clear()
    session.decode(z)
    for h in handles:
        h.remove()
    return {
        "first_block_macs": sum(first.values()),
        "steady_block_macs": sum(tally.values()),
        **{f"steady_macs_{k}": v for k, v in sorted(tally.items())},
    }


def _timer(device: torch.device) -> Callable[[Callable[[], Tensor]], tuple[float, Tensor]]:
    """(milliseconds, result) of one call: CUDA events on GPU (no host sync inside), perf_counter on CPU."""
    if device.type == "cuda":

        def timed(fn: Callable[[], Tensor]) -> tuple[float, Tensor]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end), out
    else:

        def timed(fn: Callable[[], Tensor]) -> tuple[float, Tensor]:
            t0 = time.perf_counter()
            out = fn()
            return (time.perf_counter() - t0) * 1e3, out

    return timed


def run_variant(
    base: WanVAE,
    options: VAEDecodeOptions,
    blocks: list[Tensor],
    warmup: int,
    device: torch.device,
    reference: list[Tensor] | None,
) -> tuple[dict, list[Tensor]]:
    """Warm up, then decode every block in a fresh session on a private copy of the weights."""
    vae = copy.deepcopy(base)
    weight_bytes = sum(p.numel() * p.element_size() for p in vae.parameters())
    warm = vae.stream_decoder(options=options)
    for block in blocks[:warmup]:
        warm.decode(block)
    del warm
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        gc.collect()
        torch.cuda.empty_cache()
        start_bytes = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    timed = _timer(device)
    session = vae.stream_decoder(options=options)
    times, outs, max_diff, finite = [], [], 0.0, True
    for i, block in enumerate(blocks):
        ms, out = timed(lambda b=block, dec=session: dec.decode(b))
        times.append(ms)
        finite = finite and bool(torch.isfinite(out).all())
        if reference is None:  # the baseline's frames, kept on the host so they do not count in later peaks
            outs.append(out.cpu())
        else:
            max_diff = max(max_diff, (out.float() - reference[i].to(device).float()).abs().max().item())
    result = {
        "first_block_ms": times[0],
        "steady_ms": times[1:],
        "frames_per_block": outs[-1].shape[2] if outs else None,
        "finite": finite,
        "max_abs_diff_vs_baseline": max_diff if reference is not None else 0.0,
        "cache_mib": session.state.nbytes() / 2**20,
    }
    if cuda:
        result["peak_gib"] = (torch.cuda.max_memory_allocated(device) - start_bytes + weight_bytes) / 2**30
    del session, vae
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result, outs


def summarise(
    name: str, rounds: list[dict], options: VAEDecodeOptions, macs: float, frames: int, base_ms: float | None
) -> dict:
    steady = [t for r in rounds for t in r["steady_ms"]]
    median = statistics.median(steady)
    out = {
        "name": name,
        "options": asdict(options),
        "rounds": len(rounds),
        "first_block_ms": round(rounds[0]["first_block_ms"], 2),
        "median_block_ms": round(median, 2),
        "min_block_ms": round(min(steady), 2),
        "round_medians_ms": [round(statistics.median(r["steady_ms"]), 2) for r in rounds],
        "measured_blocks": len(steady),
        "frames_per_block": frames,
        "pixel_fps": round(1e3 * frames / median, 1),
        "achieved_tflops": round(2 * macs / (median * 1e-3) / 1e12, 1),
        "speedup_vs_baseline": round(base_ms / median, 3) if base_ms else 1.0,
        "max_abs_diff_vs_baseline": max(r["max_abs_diff_vs_baseline"] for r in rounds),
        "finite": all(r["finite"] for r in rounds),
        "cache_mib": round(rounds[0]["cache_mib"], 1),
    }
    if "peak_gib" in rounds[0]:
        out["peak_gib"] = round(max(r["peak_gib"] for r in rounds), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--height", type=int, default=480, help="pixels")
    parser.add_argument("--width", type=int, default=832, help="pixels")
    parser.add_argument("--block-frames", type=int, default=3, help="latent frames per streamed block")
    parser.add_argument(
        "--blocks",
        type=int,
        default=8,
        help="blocks per measured session (the first is reported apart; the median is over the rest)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="warm-up blocks per variant (separate session)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure all variants this many times, alternating the order; the median pools the rounds",
    )
    parser.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated subset of {','.join(VARIANTS)} (baseline is always run first)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip variants that use torch.compile")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop starting new variants after this much wall time (0: no limit); what ran is still reported",
    )
    parser.add_argument(
        "--peak-tflops", type=float, default=H200_DENSE_BF16_TFLOPS, help="tensor-core peak for the %% of peak column"
    )
    parser.add_argument("--small", action="store_true", help="dim 4, 16x32, 3 blocks, no compile: a CPU smoke test")
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here (after every variant)")
    args = parser.parse_args(argv)

    t_start = time.perf_counter()
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    names = (
        list(VARIANTS)
        if args.variants is None
        else ["baseline", *(n for n in args.variants.split(",") if n and n != "baseline")]
    )
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if args.small:
        args.height, args.width = 16, 32
        args.blocks, args.warmup = min(args.blocks, 3), min(args.warmup, 1)
        if args.variants is None:
            args.no_compile = True
    if args.no_compile:
        names = [n for n in names if not VARIANTS[n].compile]
    cfg = WanVAEConfig(dim=4) if args.small else WanVAEConfig()  # dim 96: the real Wan 2.1 VAE

    macs = count_decode_macs(cfg, args.block_frames, args.height, args.width)
    torch.manual_seed(0)
    base = WanVAE(cfg).to(device=device, dtype=dtype).eval()
    s = cfg.spatial_compression
    latents = torch.randn(
        1,
        cfg.z_dim,
        args.block_frames * args.blocks,
        args.height // s,
        args.width // s,
        generator=torch.Generator().manual_seed(1),
    ).to(device)
    blocks = list(latents.split(args.block_frames, dim=2))

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    meta = {
        "device": device_name,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "height": args.height,
        "width": args.width,
        "block_latent_frames": args.block_frames,
        "blocks": args.blocks,
        "warmup": args.warmup,
        "small": args.small,
        "vae_config": {"dim": cfg.dim, "z_dim": cfg.z_dim},
        **{k: round(v) for k, v in macs.items()},
        "steady_block_gflop": round(2 * macs["steady_block_macs"] / 1e9, 1),
    }
    print(
        f"{device_name}, {meta['dtype']}, {args.height}x{args.width}, {args.block_frames} latent frames per block, "
        f"{args.blocks - 1} timed later blocks x {args.rounds} round(s) after {args.warmup} warm-up; "
        f"{meta['steady_block_gflop']} GFLOP per later block (reference formula)",
        flush=True,
    )
    print(
        "  by kind: "
        + ", ".join(
            f"{k.removeprefix('steady_macs_')} {2 * v / 1e9:.1f}"
            for k, v in macs.items()
            if k.startswith("steady_macs_")
        )
        + " GFLOP",
        flush=True,
    )

    per_variant: dict[str, list[dict]] = {n: [] for n in names}
    reference: list[Tensor] | None = None
    results: list[dict] = []
    skipped: list[str] = []
    frames = 0

    def write_json() -> None:
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"meta": meta, "results": results, "skipped": skipped}, f, indent=2)

    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else ["baseline", *reversed(names[1:])]
        for name in order:
            if args.max_seconds and time.perf_counter() - t_start > args.max_seconds and name != "baseline":
                skipped.append(f"{name} (round {rnd + 1}: --max-seconds reached)")
                continue
            t0 = time.perf_counter()
            res, outs = run_variant(base, VARIANTS[name], blocks, args.warmup, device, reference)
            if name == "baseline" and reference is None:
                reference, frames = outs, res["frames_per_block"]
                meta["baseline_abs_max"] = max(o.float().abs().max().item() for o in outs)  # scale for max|Δ|
            per_variant[name].append(res)
            print(
                f"  round {rnd + 1} {name}: median {statistics.median(res['steady_ms']):.1f} ms "
                f"(variant wall {time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
            base_ms = statistics.median([t for r in per_variant["baseline"] for t in r["steady_ms"]])
            results = [
                summarise(
                    n,
                    per_variant[n],
                    VARIANTS[n],
                    macs["steady_block_macs"],
                    frames,
                    None if n == "baseline" else base_ms,
                )
                for n in names
                if per_variant[n]
            ]
            write_json()

    header = (
        f"{'variant':<27}{'first ms':>9}{'median ms':>10}{'min ms':>8}{'px fps':>8}{'speedup':>8}"
        f"{'TFLOP/s':>8}{'% peak':>7}{'peak GiB':>9}{'max|Δ| vs base':>15}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['name']:<27}{r['first_block_ms']:>9.1f}{r['median_block_ms']:>10.1f}{r['min_block_ms']:>8.1f}"
            f"{r['pixel_fps']:>8.1f}{r['speedup_vs_baseline']:>8.3f}{r['achieved_tflops']:>8.1f}"
            f"{100 * r['achieved_tflops'] / args.peak_tflops:>7.1f}{r.get('peak_gib', float('nan')):>9.2f}"
            f"{r['max_abs_diff_vs_baseline']:>15.2e}{'' if r['finite'] else '  NON-FINITE'}"
        )
    if len(results) > 1:
        best = min(results, key=lambda r: r["median_block_ms"])
        meta["fastest"] = best["name"]
        print(
            f"fastest: {best['name']} ({best['median_block_ms']:.1f} ms, {best['speedup_vs_baseline']:.2f}x); "
            f"floor at {args.peak_tflops:.0f} TFLOP/s: {2 * macs['steady_block_macs'] / args.peak_tflops / 1e9:.1f} ms"
        )
    for s_ in skipped:
        print(f"skipped: {s_}")
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    write_json()
    return 0 if all(r["finite"] for r in results) else 1


if __name__ == "__main__":
    with torch.inference_mode():
        raise SystemExit(main())
