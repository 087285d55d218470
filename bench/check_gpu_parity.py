"""GPU parity: the fixtures run on CUDA in fp32 (TF32 off) must match the reference within 1e-4, and the
bf16 path must stay within bf16 tolerance of fp32 on the same inputs. Prints a table, writes JSON.
With --compile / --attention the fast path (compiled blocks, cuDNN attention) is what runs in both
precisions, so the check covers the optimisations too.

    python bench/check_gpu_parity.py --json out/gpu_parity.json [--compile] [--attention sdpa_cudnn]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from tests.fixture_utils import fixture_files
from tests.pipeline.test_parity import FixtureNoise, build


def run(path, dtype, compile_blocks_: bool = False, attention: str = "sdpa"):
    from inferix_core.models.registry import set_attention_backend
    from inferix_core.models.wan.causal_transformer import compile_blocks

    info, t, model, sampling, cache = build(path)
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    model = model.to("cuda", dtype)
    set_attention_backend(model, attention)
    if compile_blocks_:
        compile_blocks(model)
    req = GenerationRequest(
        p["num_blocks"], H, W, t["text_context"].to(dtype), batch_size=B, noise=FixtureNoise(t, sampling.block_frames)
    )
    out = BlockDiffusionPipeline(model, sampling, cache).generate(req).float().cpu()
    return out, t["output_latents"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--attention", default="sdpa")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for path in fixture_files("causal_wan_*.safetensors"):
        fp32, ref = run(path, torch.float32, args.compile, args.attention)
        bf16, _ = run(path, torch.bfloat16, args.compile, args.attention)
        rows.append(
            {
                "fixture": path.name,
                "compile": args.compile,
                "attention": args.attention,
                "fp32_max_abs_vs_reference": (fp32 - ref).abs().max().item(),
                "bf16_rel_vs_fp32": ((bf16 - fp32).norm() / fp32.norm()).item(),
                "bf16_max_abs_vs_fp32": (bf16 - fp32).abs().max().item(),
                "finite": bool(torch.isfinite(bf16).all() and torch.isfinite(fp32).all()),
            }
        )
    for r in rows:
        print(" | ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    ok = all(r["finite"] and r["fp32_max_abs_vs_reference"] < 1e-4 and r["bf16_rel_vs_fp32"] < 5e-2 for r in rows)
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows, "ok": ok}, indent=2))
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
