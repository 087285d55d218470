"""Where the GPU time of one 81-frame run goes: kernels grouped into GEMM / attention / the rest.

One warm-up run, then one run under `torch.profiler` (CUDA activity only). Prints the top kernels and
the share of each group, against the floors of docs/performance.md, and writes JSON. Same protocol
and options as `inferix bench` (random-weight Wan 1.3B, 480×832, bf16).

    PYTHONPATH=. python bench/profile_engine.py [--compile] [--cuda-graphs] [--attention sdpa_cudnn] --json profile.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from inferix_core.benchmark import PRESETS, BenchConfig, build_engine
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
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    preset = PRESETS["wan-1.3b"]
    pipe, context = build_engine(
        BenchConfig(compile=args.compile, attention=args.attention, cuda_graphs=args.cuda_graphs)
    )
    request = GenerationRequest(7, preset["latent_height"], preset["latent_width"], context, seed=0)
    pipe.generate(request)  # warm-up (and compile)
    torch.cuda.synchronize()
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
    if args.json:
        args.json.write_text(json.dumps({
            "compile": args.compile, "attention": args.attention, "kernel_total_s": total, "groups_s": groups,
            "kernels": [{"name": n, "seconds": s, "count": c} for n, s, c in kernels[:200]],
        }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
