"""FP8 block linears vs bf16 on the benchmark's random-weight Wan: speed, latent error and decoded-frame PSNR.

Same weights (seed 0), same noise (seed 0), same geometry as `inferix bench`. Speed: `run_engine_benchmark`
for the plain model and for the fp8 one (CUDA events, warm-up then median of the repeats). Quality: one
generation per variant, fp8 compared with the plain run: relative L2 error and max |diff| of the final
latents (all blocks, and per block, since the KV cache carries errors forward), and the PSNR of the frames
the Wan VAE architecture (random weights, dim 96) decodes from each, as uint8 frames like a sink gets them.
`--fp32-reference` also runs the fp32 model, to set the fp8 error beside the bf16 rounding error.
Random weights have no outlier channels, so `--bundled` measures the same errors on trained weights: the
bundled world model (CPU-sized), 14 blocks at 64x64, every variant against its fp32 run (fp8 emulated on CPU).

    PYTHONPATH=. python bench/bench_fp8.py --json bench_fp8.json            # GPU: Wan 1.3B, 480x832, 81 frames
    PYTHONPATH=. python bench/bench_fp8.py --preset tiny --device cpu       # CPU smoke run (fp8 is emulated)
    PYTHONPATH=. python bench/bench_fp8.py --bundled --device cpu           # trained weights, ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.clients.benchmark import DTYPES, PRESETS, BenchConfig, build_engine, run_engine_benchmark
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.overlap import to_uint8_frames


def generate(cfg: BenchConfig, dtype: torch.dtype, fp8: bool, checkpoint: str | None = None) -> torch.Tensor:
    """Final latents (B, F, C, H, W), float32 on the device, of one run with the benchmark's model and seeds.

    With `checkpoint`, trained transformer weights replace the random ones (the context stays random).
    """
    preset = PRESETS[cfg.preset]
    if checkpoint:
        from inferix_core.models.registry import load_world_model

        torch.manual_seed(0)
        model = load_world_model(checkpoint, dtype=dtype, device=cfg.device, fp8=fp8).transformer
        pipe = BlockDiffusionPipeline(
            model,
            SamplingConfig(denoising_steps=cfg.steps, block_frames=cfg.block_frames),
            KVCacheConfig(window_frames=cfg.window_frames, sink_frames=cfg.sink_frames),
        )
        mc = model.config
        context = torch.randn(1, mc.text_len, mc.text_dim, device=cfg.device, dtype=dtype)
    else:  # the weights and prompt run_engine_benchmark builds
        name = next(k for k, v in DTYPES.items() if v == dtype)
        pipe, context = build_engine(dataclasses.replace(cfg, dtype=name, fp8=fp8))
    req = GenerationRequest(
        cfg.latent_frames // cfg.block_frames, preset["latent_height"], preset["latent_width"], context, seed=0
    )
    return torch.cat([out.latents.float() for out in pipe.stream(req)], dim=1)


def latent_error(test: torch.Tensor, ref: torch.Tensor, block_frames: int) -> dict:
    """Relative L2 error and max |diff| in float64, over everything and per block of latent frames."""
    t, r = test.double(), ref.double()
    per_block = [((a - b).norm() / b.norm()).item() for a, b in zip(t.split(block_frames, 1), r.split(block_frames, 1))]
    return {
        "rel_l2": ((t - r).norm() / r.norm()).item(),
        "max_abs": (t - r).abs().max().item(),
        "ref_max_abs": r.abs().max().item(),
        "rel_l2_per_block": per_block,
    }


def decoded_psnr(test: torch.Tensor, ref: torch.Tensor, vae_dim: int, block_frames: int, dtype: torch.dtype) -> dict:
    """PSNR (dB, peak 255) of the uint8 frames the Wan VAE decodes from `test` against those from `ref`.

    Both are stream-decoded block by block (as the engine does) with the same random-weight VAE, so one
    block's frames are in memory at a time.
    """
    device = test.device
    torch.manual_seed(1)
    with device:
        vae = WanVAE(WanVAEConfig(dim=vae_dim)).to(dtype).eval().requires_grad_(False)
    dec_t, dec_r = vae.stream_decoder(), vae.stream_decoder()
    sq_err, count, frames = 0.0, 0, 0
    for bt, br in zip(test.split(block_frames, 1), ref.split(block_frames, 1)):
        ft = to_uint8_frames(dec_t.decode(bt.permute(0, 2, 1, 3, 4).to(dtype))).double()
        fr = to_uint8_frames(dec_r.decode(br.permute(0, 2, 1, 3, 4).to(dtype))).double()
        sq_err += (ft - fr).square().sum().item()
        count += fr.numel()
        frames += fr.shape[0]
    mse = sq_err / count
    return {
        "psnr_db": math.inf if mse == 0 else 10 * math.log10(255**2 / mse),
        "mse": mse,
        "frames": frames,
        "vae_dim": vae_dim,
    }


def bundled_quality(device: str, num_blocks: int = 14) -> dict:
    """Trained weights: the bundled model driving a fixed action sequence, each variant vs the fp32 run."""
    import numpy as np

    from inferix_core.api import generate_video
    from inferix_core.models.registry import load_world_model

    actions = ["accelerate"] * (num_blocks // 2) + ["steer_left"] * (num_blocks - num_blocks // 2)
    variants = {
        "fp32": {},
        "bf16": {"dtype": "bf16"},
        "fp8 + fp32": {"fp8": True},
        "fp8 + bf16": {"dtype": "bf16", "fp8": True},
    }
    results, rows = {}, {}
    for name, kw in variants.items():
        wm = load_world_model("bundled", device=device, **kw)
        results[name] = generate_video(wm, num_blocks=num_blocks, width=64, height=64, seed=0, actions=actions)
    ref = results["fp32"]
    ref_frames = np.asarray(ref.frames, dtype=np.float64)
    for name, r in results.items():
        if name == "fp32":
            continue
        row = latent_error(r.latents.float(), ref.latents.float(), 3)
        mse = float(np.mean((np.asarray(r.frames, dtype=np.float64) - ref_frames) ** 2))
        row["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(255**2 / mse)
        row["frames"] = int(ref_frames.shape[0])
        rows[f"{name} vs fp32"] = row
    return rows


def speed_row(result: dict) -> dict:
    keys = ("median_total_s", "fps", "median_first_block_s", "peak_gib")
    return {k: result[k] for k in keys} | {"median_block_s": result["median_block_s"]}


def format_report(report: dict) -> str:
    s, q = report["speed"], report["quality"]
    lines = [
        f"{report['gpu']}, torch {report['torch']}, preset {report['config']['preset']}, "
        f"{report['pixel_frames']} frames, {report['dtype']} (fp8: block linears in e4m3)",
        "",
    ]
    if s:
        lines.append(f"{'variant':<10}{'total s':>10}{'FPS':>8}{'first block s':>15}{'peak GiB':>10}")
        for name, row in s.items():
            peak = "-" if row["peak_gib"] is None else f"{row['peak_gib']:.2f}"
            lines.append(
                f"{name:<10}{row['median_total_s']:>10.3f}{row['fps']:>8.1f}"
                f"{row['median_first_block_s']:>15.3f}{peak:>10}"
            )
        if "fp8" in s and report["dtype"] in s:
            lines.append(
                f"speed-up fp8 vs {report['dtype']}: {s[report['dtype']]['median_total_s'] / s['fp8']['median_total_s']:.3f}x"
            )
        lines.append("")
    lines.append(f"{'comparison':<16}{'latent rel L2':>15}{'max |diff|':>12}{'of max |x|':>12}{'frames PSNR dB':>16}")
    for name, row in q.items():
        psnr = row.get("psnr_db")
        lines.append(
            f"{name:<16}{row['rel_l2']:>15.3e}{row['max_abs']:>12.3e}{row['ref_max_abs']:>12.3f}"
            f"{'-' if psnr is None else f'{psnr:.2f}':>16}"
        )
    for name, row in q.items():
        lines.append(f"{name} rel L2 per block: " + " ".join(f"{e:.2e}" for e in row["rel_l2_per_block"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="wan-1.3b", choices=sorted(PRESETS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="compute dtype of both variants")
    parser.add_argument("--latent-frames", type=int, default=None, help="default 21 (81 frames); 6 for tiny")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vae-dim", type=int, default=None, help="Wan VAE base width: 96 (the real one), 4 for tiny")
    parser.add_argument("--no-speed", action="store_true", help="quality only")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="speed runs with compile_blocks (both variants); "
        "Inductor then fuses the activation quantization into the preceding elementwise kernels",
    )
    parser.add_argument("--fp32-reference", action="store_true", help="also compare both with the fp32 model")
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="quality with these trained transformer weights "
        "(e.g. a Self-Forcing .safetensors) instead of random ones; speed stays random-weight",
    )
    parser.add_argument("--bundled", action="store_true", help="quality of the trained bundled model instead")
    parser.add_argument("--json", type=Path, help="write the full result here")
    args = parser.parse_args(argv)
    if args.bundled:
        with torch.inference_mode():
            quality = bundled_quality(args.device)
        report = {
            "config": {"preset": "bundled (trained)", "device": args.device, "blocks": 14, "size": "64x64"},
            "gpu": torch.cuda.get_device_name(args.device) if torch.device(args.device).type == "cuda" else "cpu",
            "torch": torch.__version__,
            "dtype": "fp32 reference",
            "pixel_frames": 165,
            "speed": {},
            "quality": quality,
        }
        print(format_report(report))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return report

    tiny = args.preset == "tiny"
    frames = args.latent_frames or (6 if tiny else 21)
    vae_dim = args.vae_dim or (4 if tiny else 96)
    dtype = DTYPES[args.dtype]
    base = BenchConfig(
        preset=args.preset,
        latent_frames=frames,
        dtype=args.dtype,
        device=args.device,
        warmup=args.warmup,
        repeats=args.repeats,
    )
    timed = dataclasses.replace(base, compile=args.compile)
    cuda = torch.device(args.device).type == "cuda"

    speed, runs = {}, {}
    if not args.no_speed:
        for name, fp8 in ((args.dtype, False), ("fp8", True)):
            result = run_engine_benchmark(dataclasses.replace(timed, fp8=fp8))
            speed[name] = speed_row(result)
            runs[name] = result

    with torch.inference_mode():
        plain = generate(base, dtype, fp8=False, checkpoint=args.checkpoint)
        quant = generate(base, dtype, fp8=True, checkpoint=args.checkpoint)
        quality = {f"fp8 vs {args.dtype}": latent_error(quant, plain, base.block_frames)}
        vae_dtype = dtype if cuda else torch.float32  # as the registry loads it: CPU convolutions run in fp32
        quality[f"fp8 vs {args.dtype}"] |= decoded_psnr(quant, plain, vae_dim, base.block_frames, vae_dtype)
        if args.fp32_reference:
            exact = generate(base, torch.float32, fp8=False, checkpoint=args.checkpoint)
            quality[f"{args.dtype} vs fp32"] = latent_error(plain, exact, base.block_frames)
            quality["fp8 vs fp32"] = latent_error(quant, exact, base.block_frames)
    finite = all(torch.isfinite(t).all() for t in (plain, quant))

    report = {
        "config": {
            **dataclasses.asdict(timed),
            "steps": list(base.steps),
            "vae_dim": vae_dim,
            "checkpoint": args.checkpoint,
        },
        "gpu": torch.cuda.get_device_name(args.device) if cuda else "cpu",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "pixel_frames": 1 + 4 * (frames - 1),
        "latents_finite": bool(finite),
        "speed": speed,
        "quality": quality,
        "runs": runs,
    }
    print(format_report(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
