"""Wan 2.1 I2V through the causal block loop: speed and memory at the released 14B shape (random weights).

Random weights at Wan2.1-I2V-14B's shape (dim 5120, 40 layers × 40 heads, ffn 13824, in_dim 36, CLIP 257 × 1280,
text 512 × 4096), 480×832 (60×104 latents, 1560 tokens per latent frame), family wan21_i2v's sampling (4 steps per
3-frame block, global attention), random prompt / CLIP tokens / cond_concat (the exact mask), diffusion only.
Reported per setting: total seconds, FPS = pixel frames (1 + 4·(F − 1)) / total, time to the first clean block,
peak GPU memory; a table on stdout and `--json`. There is no authors' causal Wan I2V pipeline to time beside
it (docs/models.md, "Wan 2.1 I2V"). `--smoke` runs a tiny model on the CPU (for tests/test_bench.py-style checks
that the script runs; its timings mean nothing).

    PYTHONPATH=. python bench/bench_wan_i2v.py --settings bf16,fp8_weights,compile --json wan_i2v_bench.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inferix_core.models.fp8 import quantize_linears_fp8
from inferix_core.models.registry import FAMILIES
from inferix_core.models.wan.block_inputs import StartImageConditioning
from inferix_core.models.wan.causal_transformer import CausalWanTransformer, compile_blocks
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest

WAN21_I2V_14B = WanConfig(model_type="i2v", in_dim=36, dim=5120, ffn_dim=13824, num_heads=40, num_layers=40,
                          has_image_input=True, clip_dim=1280)  # fmt: skip
TINY = WanConfig(model_type="i2v", in_dim=36, dim=64, ffn_dim=128, freq_dim=32, text_dim=32, text_len=16,
                 num_heads=4, num_layers=2, has_image_input=True, clip_dim=32)  # fmt: skip
SETTINGS = ("bf16", "fp8_weights", "compile")


def inputs(cfg: WanConfig, frames: int, h: int, w: int, device, dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    text = torch.randn(1, cfg.text_len, cfg.text_dim, generator=g)
    clip = torch.randn(1, 257, cfg.clip_dim, generator=g)
    cond = torch.cat([torch.zeros(1, 4, frames, h, w), torch.randn(1, 16, frames, h, w, generator=g)], dim=1)
    cond[:, :4, 0] = 1  # the mask: 1 at latent frame 0
    return text.to(device, dtype), clip.to(device, dtype), StartImageConditioning(cond.to(device, dtype))


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(setting: str, cfg: WanConfig, device, blocks: int, h: int, w: int, warmup: int, repeats: int) -> dict:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in bf16 on the GPU: 33 GB, never the 66 GB of an fp32 copy
    try:
        with torch.device(device):
            model = CausalWanTransformer(cfg).eval().requires_grad_(False)
    finally:
        torch.set_default_dtype(default)
    if setting == "fp8_weights":
        quantize_linears_fp8(model, weight_only=True)
    if setting == "compile":
        compile_blocks(model)
    fam = FAMILIES["wan21_i2v"]
    n = fam.sampling.block_frames
    text, clip, cond = inputs(cfg, blocks * n, h, w, device, dtype)
    pipe = BlockDiffusionPipeline(model, fam.sampling, fam.cache)
    times, firsts = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for i in range(warmup + repeats):
        req = GenerationRequest(num_blocks=blocks, latent_height=h, latent_width=w, context=text, seed=i,
                                image_context=clip, actions=cond)  # fmt: skip
        _sync(device)
        t0, first = time.perf_counter(), None
        latents = []
        for out in pipe.stream(req):
            _sync(device)
            first = first if first is not None else time.perf_counter() - t0
            latents.append(out.latents)
        total = time.perf_counter() - t0
        assert all(torch.isfinite(x).all() for x in latents)
        if i >= warmup:
            times.append(total)
            firsts.append(first)
    frames = 1 + 4 * (blocks * n - 1)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return {"setting": setting, "seconds": med, "fps": frames / med, "first_block_s": statistics.median(firsts),
            "peak_gib": peak, "pixel_frames": frames, "params": cfg.num_parameters()}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default="bf16", help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--blocks", type=int, default=7, help="3-frame blocks (7: 21 latent frames, 81 pixel frames)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    cfg, (h, w) = (TINY, (8, 12)) if a.smoke else (WAN21_I2V_14B, (60, 104))
    if not a.smoke and device.type != "cuda":
        raise SystemExit("the 14B shape needs a CUDA GPU; use --smoke on the CPU")
    rows = []
    for setting in a.settings.split(","):
        if setting not in SETTINGS:
            raise SystemExit(f"unknown setting '{setting}'; expected {', '.join(SETTINGS)}")
        rows.append(run(setting, cfg, device, a.blocks, h, w, a.warmup, a.repeats))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"Wan 2.1 I2V {cfg.num_parameters() / 1e9:.2f}B, {h * 8}x{w * 8}, {a.blocks} blocks, on {device}")
    print(f"{'setting':<12} {'seconds':>8} {'FPS':>7} {'first block s':>14} {'peak GiB':>9}")
    for r in rows:
        print(f"{r['setting']:<12} {r['seconds']:8.2f} {r['fps']:7.2f} {r['first_block_s']:14.2f} {r['peak_gib']:9.1f}")
    if a.json:
        a.json.write_text(json.dumps({"device": str(device), "height": h * 8, "width": w * 8, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
