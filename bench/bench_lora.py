"""What a LoRA costs at load time: reading + merging a LongLive-sized LoRA into a Wan 2.1 1.3B transformer.

Random weights (the 1.3B shapes, bf16) and a random rank-256 peft LoRA in LongLive's `lora.pt` layout (every
linear of the 30 blocks, `generator_lora` key), merged with `merge_lora_files` on the given device; the
merged weights are checked against an fp64 closed form on a few layers. The merged model's per-step cost is
the base model's (the LoRA is gone after the merge), so only the load-time cost is measured. Prints a table
and writes JSON.

    PYTHONPATH=. python bench/bench_lora.py --device cuda --json lora_bench.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from inferix_core.models.lora import merge_lora_files, read_lora
from inferix_core.models.wan.config import WanConfig

LINEARS = ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
           "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2")  # fmt: skip


def block_state(cfg: WanConfig, dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
    """The block linears of a random 1.3B transformer (the tensors a LongLive LoRA touches)."""
    g = torch.Generator(device=device).manual_seed(0)
    shapes = {"ffn.0": (cfg.ffn_dim, cfg.dim), "ffn.2": (cfg.dim, cfg.ffn_dim)}
    state = {}
    for i in range(cfg.num_layers):
        for m in LINEARS:
            out_f, in_f = shapes.get(m, (cfg.dim, cfg.dim))
            state[f"blocks.{i}.{m}.weight"] = (torch.randn(out_f, in_f, generator=g, device=device) / in_f**0.5).to(
                dtype
            )
    return state


def write_lora(path: Path, state: dict[str, torch.Tensor], rank: int) -> None:
    g = torch.Generator().manual_seed(1)
    sd = {}
    for key, w in state.items():
        m = key.removesuffix(".weight")
        sd[f"base_model.model.{m}.lora_A.weight"] = (torch.randn(rank, w.shape[1], generator=g) * 0.01).bfloat16()
        sd[f"base_model.model.{m}.lora_B.weight"] = (torch.randn(w.shape[0], rank, generator=g) * 0.01).bfloat16()
    torch.save({"generator_lora": sd, "critic_lora": {}, "step": 0}, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rank", type=int, default=256, help="LongLive's rank")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--layers", type=int, default=30, help="blocks of the 1.3B shape to merge into (30 = all)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    cfg = WanConfig(num_layers=args.layers)  # Wan 2.1 T2V 1.3B shapes
    state = block_state(cfg, torch.bfloat16, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lora.pt"
        write_lora(path, {k: v.cpu() for k, v in state.items()}, args.rank)
        size = path.stat().st_size
        t0 = time.perf_counter()
        lora = read_lora(path)
        read_s = time.perf_counter() - t0
        merge_s = []
        for _ in range(args.repeats):
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            merged = merge_lora_files(state, [(lora, 1.0)], device=args.device)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            merge_s.append(time.perf_counter() - t0)
    worst = 0.0
    for key in ("blocks.0.self_attn.q.weight", f"blocks.{args.layers - 1}.ffn.0.weight"):
        patch = lora.patches[f"base_model.model.{key.removesuffix('.weight')}"]
        ref = state[key].double() + patch.up.double().to(args.device) @ patch.down.double().to(args.device)
        worst = max(worst, ((merged[key].double() - ref).abs() / ref.abs().clamp_min(1e-3)).max().item())
    result = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "rank": args.rank,
        "modules": len(lora.patches),
        "lora_file_mib": size / 2**20,
        "read_s": read_s,
        "merge_s_median": sorted(merge_s)[len(merge_s) // 2],
        "merge_s": merge_s,
        "max_rel_err_vs_fp64": worst,
    }
    print(f"{'device':<28} {'rank':>5} {'modules':>8} {'file MiB':>9} {'read s':>7} {'merge s':>8} {'rel err':>8}")
    print(
        f"{result['device']:<28} {args.rank:>5} {result['modules']:>8} {result['lora_file_mib']:>9.1f} "
        f"{read_s:>7.2f} {result['merge_s_median']:>8.3f} {worst:>8.1e}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
