"""Benchmark streamed VAE decoding: the real Wan 2.1 VAE architecture (dim 96) and the TAEHV tiny decoder.

Random weights (timing does not depend on them) at 480x832 by default, decoding blocks of 3 latent
frames through a stream session, as the block-diffusion pipeline does. On CUDA, times come from CUDA
events after warm-up blocks and the median over the measured blocks is reported; on CPU, wall time.

    python bench/bench_vae.py --json vae_bench.json             # GPU, real sizes
    python bench/bench_vae.py --tiny --device cpu               # smoke test on CPU (seconds)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch

from inferix_core.vae import TAEHV, SpatialTiling, TAEHVConfig, WanVAE, WanVAEConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Milliseconds for one call: CUDA events on GPU (no host sync inside the call), perf_counter on CPU."""
    if device.type == "cuda":

        def timed(fn: Callable[[], object]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
    else:

        def timed(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3

    return timed


def bench_stream(
    name: str, decoder_factory, latents: torch.Tensor, block_frames: int, warmup: int, device: torch.device
) -> dict:
    """Decode `latents` block by block in a fresh session; warm-up blocks come from a separate session."""
    timed = _timer(device)
    blocks = latents.split(block_frames, dim=2)
    warm = decoder_factory()
    for i in range(min(warmup, len(blocks))):
        warm.decode(blocks[i])
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    session = decoder_factory()
    times, frames = [], []
    for block in blocks:
        out: list[torch.Tensor] = []
        times.append(timed(lambda b=block, o=out: o.append(session.decode(b))))
        frames.append(out[0].shape[2])
    steady = times[1:] or times  # block 0 makes fewer frames (1 + 4·(n − 1))
    result = {
        "name": name,
        "blocks": len(blocks),
        "block_latent_frames": block_frames,
        "first_block_ms": round(times[0], 2),
        "median_block_ms": round(statistics.median(steady), 2),
        "min_block_ms": round(min(steady), 2),
        "frames_per_block": frames[1] if len(frames) > 1 else frames[0],
    }
    result["pixel_fps"] = round(1e3 * result["frames_per_block"] / result["median_block_ms"], 1)
    if device.type == "cuda":
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    state = getattr(session, "state", None)
    if hasattr(state, "nbytes"):
        result["cache_mib"] = round(state.nbytes() / 2**20, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--height", type=int, default=480, help="pixels")
    parser.add_argument("--width", type=int, default=832, help="pixels")
    parser.add_argument("--block-frames", type=int, default=3, help="latent frames per streamed block")
    parser.add_argument("--blocks", type=int, default=7, help="measured blocks")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up blocks (separate session)")
    parser.add_argument("--tile", type=int, default=0, help="also bench spatial tiling with this tile edge (latents)")
    parser.add_argument("--tiny", action="store_true", help="small widths and 64x64 for a quick CPU smoke test")
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = parser.parse_args()

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.tiny:
        args.height, args.width, args.blocks, args.warmup = 64, 64, min(args.blocks, 3), min(args.warmup, 1)
    vae_cfg = WanVAEConfig(dim=8) if args.tiny else WanVAEConfig()  # dim 96: the real Wan 2.1 VAE
    tae_cfg = TAEHVConfig(decoder_channels=(16, 16, 8, 8), encoder_channels=8) if args.tiny else TAEHVConfig()
    torch.manual_seed(0)
    vae = WanVAE(vae_cfg).to(device=device, dtype=dtype).eval()
    tae = TAEHV(tae_cfg).to(device=device, dtype=dtype).eval()
    s = vae_cfg.spatial_compression
    latents = torch.randn(
        1, vae_cfg.z_dim, args.block_frames * args.blocks, args.height // s, args.width // s, device=device
    )

    results = [
        bench_stream("wan_vae", vae.stream_decoder, latents, args.block_frames, args.warmup, device),
        bench_stream("taehv", tae.stream_decoder, latents, args.block_frames, args.warmup, device),
    ]
    if args.tile:
        tiling = SpatialTiling(tile_latent=args.tile, overlap_latent=max(args.tile // 4, 1))
        results.append(
            bench_stream(
                f"wan_vae_tiled{args.tile}",
                lambda: vae.stream_decoder(tiling=tiling),
                latents,
                args.block_frames,
                args.warmup,
                device,
            )
        )

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"{device_name}, {str(dtype).removeprefix('torch.')}, {args.height}x{args.width}, "
        f"{args.block_frames} latent frames per block, median of {args.blocks - 1} blocks after {args.warmup} warm-up"
    )
    header = (
        f"{'decoder':<18}{'first ms':>10}{'median ms':>11}{'frames':>8}{'px fps':>9}{'peak GiB':>10}{'cache MiB':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['name']:<18}{r['first_block_ms']:>10.1f}{r['median_block_ms']:>11.1f}{r['frames_per_block']:>8}"
            f"{r['pixel_fps']:>9.1f}{r.get('peak_mem_gib', float('nan')):>10.2f}{r.get('cache_mib', float('nan')):>11.1f}"
        )
    if args.json_out:
        meta = {
            "device": device_name,
            "dtype": str(dtype),
            "height": args.height,
            "width": args.width,
            "tiny": args.tiny,
            "torch": torch.__version__,
            "vae_config": {"dim": vae_cfg.dim, "z_dim": vae_cfg.z_dim},
        }
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
