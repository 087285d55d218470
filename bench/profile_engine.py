"""Where the GPU time of one 81-frame run goes: kernels grouped into GEMM / attention / the rest.

One warm-up run, then one run under `torch.profiler` (CUDA activity only). Prints the top kernels and
the share of each group, and writes JSON. Same protocol and options as `inferix bench` (random-weight Wan
1.3B, 480×832, bf16, the request users get).

With `--efficiency` each group is also set against its measured peak on this GPU (bench/kernel_efficiency.py):
the FLOPs the run does (counted from the calls' shapes, cross-checked by torch's FlopCounterMode), the time
those FLOPs take at the rate measured for the very same shapes, and that time over the group's kernel time.

    PYTHONPATH=. python bench/profile_engine.py [--compile] [--cuda-graphs] [--attention sdpa_cudnn] \
        [--efficiency] --json profile.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from inferix_core.clients.benchmark import PRESETS, BenchConfig, build_engine
from inferix_core.pipeline import GenerationRequest

GROUPS = (
    ("attention", re.compile(r"fmha|flash|attention|cudnn|sdpa", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|sm90|matmul|_mm_|splitk", re.I)),
)


def group_of(name: str) -> str:
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return "other (elementwise, norms, copies)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--attention", default="sdpa")
    p.add_argument("--cuda-graphs", action="store_true", help="whole transformer calls as CUDA graphs")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--efficiency", action="store_true", help="each group against its measured peak on this GPU")
    p.add_argument(
        "--rope-formula",
        choices=("flip", "stack"),
        default=None,
        help="the compiled RoPE formula (models/wan/layers.py COMPILED_ROPE_FORMULA); default: as built",
    )
    p.add_argument(
        "--coordinate-descent",
        action="store_true",
        help="compile the blocks with Inductor's coordinate_descent_tuning (BLOCK_INDUCTOR_OPTIONS)",
    )
    p.add_argument(
        "--persistent-rows",
        default=None,
        metavar="HINTS",
        help="compile the norms over d as persistent reductions where their reduction hint is one of HINTS "
        "(comma list, e.g. INNER or INNER,DEFAULT; bench/inductor_choices.py)",
    )
    p.add_argument(
        "--no-fused-norm-rope",
        action="store_true",
        help="q/k RMSNorm + RoPE as the modules (Inductor's fusion) instead of the Triton kernel the blocks run",
    )
    p.add_argument(
        "--no-fused-norms",
        action="store_true",
        help="the adaLN LayerNorm + modulation as the modules (Inductor's fusion) instead of the Triton kernel",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.no_fused_norm_rope:
        from inferix_core.models.wan.causal_transformer import SelfAttention

        SelfAttention.fused_norm_rope = False
    if args.no_fused_norms:
        from inferix_core.models.wan.causal_transformer import AttentionBlock

        AttentionBlock.fused_norms = False
    if args.persistent_rows:  # this thread compiles the blocks; the graph cache's key does not see the handler
        from bench.inductor_choices import persistent_row_reductions

        torch._inductor.config.fx_graph_cache = False
        persistent_row_reductions(hints=tuple(args.persistent_rows.split(","))).__enter__()
    if args.coordinate_descent:
        from inferix_core.models.wan import causal_transformer

        causal_transformer.BLOCK_INDUCTOR_OPTIONS["coordinate_descent_tuning"] = True
    if args.rope_formula is not None:
        from inferix_core.models.wan import layers

        layers.COMPILED_ROPE_FORMULA = args.rope_formula
    preset = PRESETS["wan-1.3b"]
    pipe, context = build_engine(
        BenchConfig(
            compile=args.compile,
            attention=args.attention,
            cuda_graphs=args.cuda_graphs,
        )
    )
    # the request users get (generate_video without a kept world, as `inferix bench` runs it)
    request = GenerationRequest(
        7, preset["latent_height"], preset["latent_width"], context, seed=0, final_context_pass=False
    )
    calls = record_calls(pipe) if args.efficiency else None
    t0 = time.perf_counter()
    pipe.generate(request)  # warm-up (and compile)
    torch.cuda.synchronize()
    print(f"warm-up run (compiles included) {time.perf_counter() - t0:.1f} s")
    if args.persistent_rows:
        from bench.inductor_choices import DECISIONS

        print("persistent-reduction decisions (hint, size, persistent): calls", sorted(DECISIONS.items()))
    if calls is not None:
        calls_of_run = list(calls)
        calls.clear()
        wall = time_run(pipe, request)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        pipe.generate(request)
        torch.cuda.synchronize()
    kernels = [(e.key, e.device_time_total / 1e6, e.count) for e in prof.key_averages() if e.device_time_total > 0]
    kernels = [k for k in kernels if not k[0].startswith(("aten::", "cudaStream", "Memcpy", "Memset"))] or kernels
    kernels.sort(key=lambda k: -k[1])
    total = sum(k[1] for k in kernels)
    groups: dict[str, float] = {}
    for name, seconds, _ in kernels:
        groups[group_of(name)] = groups.get(group_of(name), 0.0) + seconds
    print(
        f"GPU kernel time {total:.3f} s (compile={args.compile}, cuda_graphs={args.cuda_graphs}, attention={args.attention})"
    )
    for g, s in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {g:<36} {s:7.3f} s  {100 * s / total:5.1f} %")
    print(f"top {args.top} kernels:")
    for name, seconds, count in kernels[: args.top]:
        print(f"  {seconds:7.3f} s  {count:6d}x  [{group_of(name)[:5]}] {name[:110]}")
    result = {
        "compile": args.compile, "cuda_graphs": args.cuda_graphs, "attention": args.attention,
        "kernel_total_s": total, "groups_s": groups, "persistent_rows": args.persistent_rows,
        "kernels": [{"name": n, "seconds": s, "count": c} for n, s, c in kernels[:200]],
    }  # fmt: skip
    if args.efficiency:
        from bench.kernel_efficiency import efficiency_report, print_efficiency

        counted = count_flops(request)
        result["efficiency"] = efficiency_report(
            preset["config"], calls_of_run, groups, counted, wall_s=wall, attention=args.attention
        )
        print_efficiency(result["efficiency"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def record_calls(pipe) -> list[tuple[int, int]]:
    """(query tokens, attended keys) of every transformer call, read from the cache as each call runs."""
    calls: list[tuple[int, int]] = []
    real = pipe._call

    def spy(state, x, t, start, num_frames, action, **kwargs):
        out = real(state, x, t, start, num_frames, action, **kwargs)
        calls.append((num_frames * state.cache.spec.frame_tokens, int(state.cache.attended_tokens)))
        return out

    pipe._call = spy
    return calls


def time_run(pipe, request) -> float:
    """Wall seconds of one run, unprofiled (CUDA events around it)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    pipe.generate(request)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def count_flops(request) -> dict:
    """torch's FlopCounterMode over one eager SDPA run of the same model and request (the same math as
    any compiled or FA4 run): GEMM (mm/addmm/bmm/the GELU-epilogue addmm …) and attention FLOPs."""
    from bench.kernel_efficiency import flop_counter_mode

    eager, _ = build_engine(BenchConfig())
    counter = flop_counter_mode()
    with counter, torch.no_grad():
        eager.generate(request)
    by_op = {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    del eager
    torch.cuda.empty_cache()
    attention = sum(n for op, n in by_op.items() if "attention" in op)
    return {"gemm": sum(by_op.values()) - attention, "attention": attention, "by_op": by_op}


if __name__ == "__main__":
    sys.exit(main())
