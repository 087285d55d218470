"""Bytes and bandwidth of every compiled (Triton) kernel of a run, against this GPU's copy roof (issue #19).

The memory-bound kernel groups of `bench/profile_engine.py` and `bench/profile_vae_decode.py` had a time but
no byte count, so their efficiency could not be stated. Inductor knows each kernel's bytes (its own estimate
of the buffers a kernel reads and writes, `kernel_num_gb`) and, with `profile_bandwidth`, times every kernel
on its own (cold L2, do_bench) as the run calls it. This script turns that on, runs one warm-up and one
counted run of the transformer (`compile`, no CUDA graphs: the same kernels) or of the Wan VAE's streamed
decode (the loader's options, compiled), and reports the Triton kernels' total bytes, isolated time and
bandwidth against a device-to-device copy measured in the same process.

In this mode inductor benchmarks each kernel instead of running it once, so in-place kernels apply more than
once and the frames are garbage: use it for bytes and times only.

    PYTHONPATH=. python bench/triton_bandwidth.py --what transformer|vae [--top 15] --json bw.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import torch


def arm() -> list[tuple[float, float, float, str]]:
    """Turn on inductor's per-kernel bandwidth profile; returns the list every compiled graph's calls go to
    (ms, GB, GB/s, kernel) for the whole process (inductor clears its own list at each graph's start)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime import triton_heuristics

    inductor_config.profile_bandwidth = True
    inductor_config.profile_bandwidth_regex = ""
    calls: list[tuple[float, float, float, str]] = []

    def end_graph(_output_file) -> None:
        calls.extend(triton_heuristics.collected_calls)
        triton_heuristics.collected_calls.clear()

    triton_heuristics.end_graph = end_graph  # the generated modules import it when they load
    return calls


def summarise(calls: list[tuple[float, float, float, str]], copy_gbps: float, top: int) -> dict:
    by_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for ms, gb, _, name in calls:
        k = by_kernel[name]
        k[0] += ms / 1e3
        k[1] += gb
        k[2] += 1
    total_s = sum(v[0] for v in by_kernel.values())
    total_gb = sum(v[1] for v in by_kernel.values())
    rows = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])
    return {
        "kernel_calls": len(calls),
        "kernels": len(by_kernel),
        "isolated_s": total_s,
        "gb": total_gb,
        "gbps": total_gb / total_s if total_s else None,
        "copy_gbps": copy_gbps,
        "efficiency": total_gb / total_s / copy_gbps if total_s else None,
        "time_at_copy_roof_s": total_gb / copy_gbps,
        "top": [
            {"kernel": n, "s": s, "gb": gb, "calls": c, "gbps": gb / s if s else None} for n, (s, gb, c) in rows[:top]
        ],
    }


def run_transformer() -> Iterator[None]:
    from inferix_core.benchmark import PRESETS, BenchConfig, build_engine
    from inferix_core.pipeline import GenerationRequest

    preset = PRESETS["wan-1.3b"]
    pipe, context = build_engine(BenchConfig(compile=True))
    request = GenerationRequest(
        7, preset["latent_height"], preset["latent_width"], context, seed=0, final_context_pass=False
    )
    with torch.no_grad():
        pipe.generate(request)
        yield
        pipe.generate(request)


def run_vae() -> Iterator[None]:
    sys.path.insert(0, str(Path(__file__).parent))
    from profile_vae_decode import build_vae, decode_video

    vae = build_vae(torch.bfloat16, compile=True)
    s = vae.config.spatial_compression
    blocks = [torch.randn(1, vae.config.z_dim, 3, 480 // s, 832 // s, device="cuda", dtype=torch.bfloat16)] * 7
    with torch.no_grad():
        decode_video(vae, blocks)
        yield
        decode_video(vae, blocks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--what", choices=("transformer", "vae"), required=True)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from kernel_efficiency import measure_copy_gbps

    calls = arm()
    steps = run_transformer() if args.what == "transformer" else run_vae()
    next(steps)  # warm-up (compiles, autotunes, benchmarks each kernel once)
    calls.clear()
    for _ in steps:  # the counted run
        pass
    torch.cuda.synchronize()
    r = summarise(calls, measure_copy_gbps(), args.top)
    print(f"{args.what}: {r['kernel_calls']} Triton kernel calls ({r['kernels']} kernels), {r['gb']:.1f} GB in "
          f"{r['isolated_s']:.4f} s isolated = {r['gbps'] or 0:.0f} GB/s; device copy {r['copy_gbps']:.0f} GB/s → "
          f"{100 * (r['efficiency'] or 0):.1f} % of the copy roof ({r['time_at_copy_roof_s']:.4f} s at the roof)")  # fmt: skip
    for k in r["top"]:
        print(f"  {k['s']:8.4f} s {k['gb']:8.2f} GB {k['gbps'] or 0:6.0f} GB/s  x{k['calls']:<5d} {k['kernel'][:90]}")
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
