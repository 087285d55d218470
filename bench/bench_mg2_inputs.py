"""Benchmark the Matrix-Game 2.0 input side: CLIP ViT-H/14 tokens and the start image's cond_concat per block.

Random weights at the real sizes (CLIP ViT-H/14 vision tower through transformers, Wan 2.1 VAE dim 96),
352×640, 3-latent-frame blocks. It measures:

* the one-off costs before the first block: preprocessing, the CLIP encode, and the first block's
  cond_concat (image frame + 8 zero frames);
* the per-block cost of extending cond_concat (12 zero frames through the streaming encoder) until the
  encoder's cache is steady and the latent is repeated for free (`StartImageLatents.steady_from`).

On CUDA, times come from CUDA events after a warm-up; on CPU, wall time. It prints a table and writes JSON.

    python bench/bench_mg2_inputs.py --json mg2_inputs.json              # GPU, real sizes
    python bench/bench_mg2_inputs.py --tiny --device cpu --blocks 4      # smoke test on CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import torch

from inferix_core.engine.image_conditioning import StartImageLatents, start_image_pixels
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vision import CLIPVisionEncoder

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def timed_ms(device: torch.device, fn):
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, out


def clip_encoder(tiny: bool, device: torch.device, dtype: torch.dtype) -> CLIPVisionEncoder:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    if tiny:
        config = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=1,
                                  image_size=224, patch_size=14, hidden_act="gelu")  # fmt: skip
    else:  # ComfyUI's clip_vision_config_h.json
        config = CLIPVisionConfig(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                                  num_attention_heads=16, image_size=224, patch_size=14, hidden_act="gelu",
                                  layer_norm_eps=1e-5)  # fmt: skip
    return CLIPVisionEncoder(CLIPVisionModel(config).to(device=device, dtype=dtype), "random")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=352)
    parser.add_argument("--blocks", type=int, default=16, help="blocks of 3 latent frames to extend cond_concat by")
    parser.add_argument("--tiny", action="store_true", help="tiny CLIP and VAE (CPU smoke test)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    torch.manual_seed(0)
    image = np.random.RandomState(0).randint(0, 256, (720, 1280, 3), dtype=np.uint8)
    pre_ms, pixels = timed_ms(device, lambda: start_image_pixels(image, args.height, args.width))
    encoder = clip_encoder(args.tiny, device, dtype)
    encoder.encode(pixels.to(device))  # warm-up
    clip_ms, tokens = timed_ms(device, lambda: encoder.encode(pixels.to(device)))
    vae = WanVAE(WanVAEConfig(dim=4 if args.tiny else 96)).to(device=device, dtype=dtype).eval().requires_grad_(False)
    StartImageLatents(vae, pixels.to(device)).cond_concat(0, 3)  # warm-up
    first_ms, start = timed_ms(device, lambda: _first_block(vae, pixels.to(device)))
    per_block = []
    for b in range(1, args.blocks):
        ms, _ = timed_ms(device, lambda b=b: start.cond_concat(3 * b, 3))
        per_block.append(ms)
    steady = start.steady_from
    before = [ms for b, ms in enumerate(per_block, 1) if steady is None or 3 * b < steady]
    after = [ms for b, ms in enumerate(per_block, 1) if steady is not None and 3 * b >= steady]
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "dtype": args.dtype,
        "size": [args.width, args.height],
        "tiny": args.tiny,
        "preprocess_ms": pre_ms,
        "clip_encode_ms": clip_ms,
        "clip_tokens": list(tokens.shape),
        "first_block_cond_concat_ms": first_ms,
        "per_block_cond_concat_ms_median_before_steady": statistics.median(before) if before else None,
        "per_block_cond_concat_ms_median_after_steady": statistics.median(after) if after else None,
        "steady_from_latent_frame": steady,
        "blocks": args.blocks,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }
    print(f"| step | ms |\n|---|---|\n| preprocess (crop/resize) | {pre_ms:.1f} |\n| CLIP tokens {list(tokens.shape)} | "
          f"{clip_ms:.1f} |\n| cond_concat, first block | {first_ms:.1f} |")  # fmt: skip
    for key in ("per_block_cond_concat_ms_median_before_steady", "per_block_cond_concat_ms_median_after_steady"):
        value = result[key]
        print(f"| {key.replace('_', ' ')} | {'—' if value is None else f'{value:.2f}'} |")
    print(f"steady from latent frame: {steady}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


def _first_block(vae, pixels):
    start = StartImageLatents(vae, pixels)
    start.cond_concat(0, 3)
    return start


if __name__ == "__main__":
    main()
