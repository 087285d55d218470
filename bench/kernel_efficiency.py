"""Each kernel group of a run against its measured peak on this GPU, for the very shapes the run has (issue #19).

The issue allows `blocked` only with a profile that shows every kernel group at >= 85 % of its measured
peak. `bench/profile_engine.py --efficiency` gives this module the group times of a profiled run, the
(query tokens, attended keys) of every transformer call and torch's FlopCounterMode totals, and it:

- counts the run's FLOPs from those shapes (a Wan block's linears: 6·d² + 2·d·ffn multiply-adds per token;
  attention: 4·Lq·Lk·d per layer, self and cross), printed beside FlopCounterMode's count;
- measures, on this GPU, the rate of each linear shape (`F.linear` at M = the call's tokens), of attention
  at each (Lq, Lk) with the run's backend, and of a device copy (the memory-bound group's roof);
- reports per group: the time its FLOPs take at those measured rates, over its kernel time (efficiency).

The memory-bound group (norms, RoPE, modulation, KV writes) has no byte count for compiled kernels, so its
row gives its time and the copy roof only.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F
from torch.utils import flop_counter

from inferix_core.attention.registry import get_attention_backend
from inferix_core.models.wan.config import WanConfig

REPEATS = 15
INNER = 10  # calls per timed sample


def _time(fn, repeats: int = REPEATS, inner: int = INNER) -> float:
    """Median seconds of one fn() call: `repeats` CUDA-event samples of `inner` back-to-back calls each, after
    warm-up. Back to back, as in the model: one 50 µs GEMM timed alone reads its launch gap as kernel time."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return sorted(times)[len(times) // 2]


def _addmm_activation_flop(bias_shape, a_shape, b_shape, *args, **kwargs) -> int:
    """`aten._addmm_activation` (the FFN up-projection with its GELU epilogue, bf16 on CUDA) is an addmm:
    FlopCounterMode has no formula for it and counted those GEMMs as zero."""
    return flop_counter.addmm_flop(bias_shape, a_shape, b_shape)


def flop_counter_mode() -> flop_counter.FlopCounterMode:
    """torch's FlopCounterMode with every GEMM the model runs counted, the epilogue-fused addmm included."""
    return flop_counter.FlopCounterMode(
        display=False, custom_mapping={torch.ops.aten._addmm_activation: _addmm_activation_flop}
    )


def linear_classes(cfg: WanConfig) -> list[tuple[str, int, int, int]]:
    """(name, in, out, how many per block) of a Wan block's linears on the video tokens."""
    d, f = cfg.dim, cfg.ffn_dim
    return [("d→d (self q/k/v/o, cross q/o)", d, d, 6), ("d→ffn", d, f, 1), ("ffn→d", f, d, 1)]


def analytic_flops(cfg: WanConfig, calls: list[tuple[int, int]]) -> dict[str, float]:
    """The block linears' and the attention FLOPs of these calls (the embeddings and the head are left out)."""
    per_token = sum(2 * i * o * n for _, i, o, n in linear_classes(cfg)) * cfg.num_layers
    gemm = sum(lq * per_token for lq, _ in calls)
    self_attn = sum(4 * lq * lk * cfg.dim * cfg.num_layers for lq, lk in calls)
    cross = sum(4 * lq * cfg.text_len * cfg.dim * cfg.num_layers for lq, _ in calls)
    return {"gemm": float(gemm), "attention_self": float(self_attn), "attention_cross": float(cross)}


def measure_linear(cfg: WanConfig, tokens: int, dtype=torch.bfloat16) -> dict[str, float]:
    """TFLOP/s of each linear class at M = tokens, and of one large square GEMM (the GPU's GEMM roof)."""
    out = {}
    for name, i, o, _ in linear_classes(cfg):
        x = torch.randn(tokens, i, device="cuda", dtype=dtype)
        w = torch.randn(o, i, device="cuda", dtype=dtype)
        out[name] = 2 * tokens * i * o / _time(lambda x=x, w=w: F.linear(x, w)) / 1e12
    a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    out["8192³ (GPU roof)"] = 2 * 8192**3 / _time(lambda: a @ a) / 1e12
    return out


def measure_attention(cfg: WanConfig, shapes: set[tuple[int, int]], backend: str, dtype=torch.bfloat16) -> dict:
    """TFLOP/s of the run's attention backend at each (query tokens, keys), (B, L, H, D) bf16."""
    attend = get_attention_backend(backend).attend
    heads, head_dim = cfg.num_heads, cfg.dim // cfg.num_heads
    out = {}
    for lq, lk in sorted(shapes):
        q = torch.randn(1, lq, heads, head_dim, device="cuda", dtype=dtype)
        k = torch.randn(1, lk, heads, head_dim, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        out[(lq, lk)] = 4 * lq * lk * heads * head_dim / _time(lambda q=q, k=k, v=v: attend(q, k, v)) / 1e12
    return out


def measure_copy_gbps(gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth (read + write bytes), the roof of the memory-bound kernels."""
    n = int(gib * 2**30) // 2
    src = torch.empty(n, device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * src.element_size() / _time(lambda: dst.copy_(src), repeats=5, inner=4) / 1e9


def efficiency_report(
    cfg: WanConfig,
    calls: list[tuple[int, int]],
    groups_s: dict[str, float],
    counted: dict,
    *,
    wall_s: float,
    attention: str,
) -> dict:
    """Per group: FLOPs, achieved rate, the time at the measured rates of the same shapes, efficiency."""
    flops = analytic_flops(cfg, calls)
    tokens = Counter(lq for lq, _ in calls)
    lq = tokens.most_common(1)[0][0]
    linear = measure_linear(cfg, lq)
    shapes = {(q, k) for q, k in calls} | {(q, cfg.text_len) for q, _ in calls}
    attn_rates = measure_attention(cfg, shapes, attention)
    # GEMM: the counted FLOPs (FlopCounterMode) spread over the linear classes by their analytic shares
    weights = {name: i * o * n for name, i, o, n in linear_classes(cfg)}
    total_w = sum(weights.values())
    gemm_flops = counted["gemm"] or flops["gemm"]
    gemm_ideal = sum(gemm_flops * w / total_w / (linear[name] * 1e12) for name, w in weights.items())
    attn_ideal = sum(4 * q * k * cfg.dim * cfg.num_layers / (attn_rates[(q, k)] * 1e12) for q, k in calls)
    attn_ideal += sum(4 * q * cfg.text_len * cfg.dim * cfg.num_layers / (attn_rates[(q, cfg.text_len)] * 1e12)
                      for q, _ in calls)  # fmt: skip
    attn_flops = flops["attention_self"] + flops["attention_cross"]
    gemm_s, attn_s = groups_s.get("gemm", 0.0), groups_s.get("attention", 0.0)
    other_s = sum(v for k, v in groups_s.items() if k not in ("gemm", "attention"))
    kernel_s = sum(groups_s.values())
    return {
        "calls": len(calls),
        "query_tokens": lq,
        "flops_analytic": flops,
        "flops_counted": {k: counted[k] for k in ("gemm", "attention")},
        "counted_by_op": counted.get("by_op", {}),
        "linear_tflops": linear,
        "attention_tflops": {f"{q}x{k}": r for (q, k), r in attn_rates.items()},
        "copy_gbps": measure_copy_gbps(),
        "groups": {
            "gemm": _flop_group(gemm_s, gemm_flops, gemm_ideal),
            "attention": _flop_group(attn_s, attn_flops, attn_ideal),
            "other": {"kernel_s": other_s},
        },
        "kernel_s": kernel_s,
        "wall_s": wall_s,
        "gpu_idle_s": wall_s - kernel_s,
    }


def _flop_group(kernel_s: float, flops: float, ideal_s: float) -> dict:
    rate = flops / kernel_s / 1e12 if kernel_s else None
    return {"kernel_s": kernel_s, "flops": flops, "ideal_s": ideal_s, "achieved_tflops": rate,
            "efficiency": ideal_s / kernel_s if kernel_s else None}  # fmt: skip


def print_efficiency(r: dict) -> None:
    fc, fa = r["flops_counted"], r["flops_analytic"]
    print(f"FLOPs: GEMM counted {fc['gemm'] / 1e12:.1f} T (block linears {fa['gemm'] / 1e12:.1f} T); attention "
          f"counted {fc['attention'] / 1e12:.1f} T (self {fa['attention_self'] / 1e12:.1f} T + cross "
          f"{fa['attention_cross'] / 1e12:.1f} T); {r['calls']} calls of {r['query_tokens']} tokens")  # fmt: skip
    print("measured peaks here: linear " + ", ".join(f"{k} {v:.0f}" for k, v in r["linear_tflops"].items())
          + " TFLOP/s")  # fmt: skip
    print("  attention " + ", ".join(f"{k} {v:.0f}" for k, v in r["attention_tflops"].items())
          + f" TFLOP/s; device copy {r['copy_gbps']:.0f} GB/s")  # fmt: skip
    print(f"{'group':<10} {'kernel s':>9} {'achieved':>10} {'at peak s':>10} {'efficiency':>10}")
    for name, g in r["groups"].items():
        if "flops" in g:
            print(f"{name:<10} {g['kernel_s']:9.3f} {g['achieved_tflops'] or 0:8.0f} T {g['ideal_s']:10.3f} "
                  f"{100 * (g['efficiency'] or 0):9.1f} %")  # fmt: skip
        else:
            print(f"{name:<10} {g['kernel_s']:9.3f}  (memory-bound; no byte count for compiled kernels)")
    print(f"kernels {r['kernel_s']:.3f} s, wall {r['wall_s']:.3f} s, GPU idle {r['gpu_idle_s']:.3f} s")
