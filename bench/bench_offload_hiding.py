"""How much of the offloaded KV cache's copy time the compute hides (a speed figure; asserts nothing).

Moved out of tests/cache/test_cache_cuda.py (issue #49), which keeps the correctness of the same layouts. Setup
(`offload_layouts` there): the 1.3B model's frame size and width (480×832 → 1560 tokens, dim 1536, ffn 8960),
8 layers, window 12 + sink 3, page 3, so the bytes per FLOP are the real ones. Half the layers offloaded: copies
≈ 40 % of compute, the target is ≥ 90 % hidden; all offloaded: ≈ 80 %, no slack left for jitter, ≥ 50 % is good.
Hidden share = 1 − max(0, t_offload − t_resident) / copy time (median of 3 runs each), and from the compute
stream's waits (`hidden_h2d_pct`). The result differs with the card (H100 vs H200 bandwidth) and its load.

    PYTHONPATH=. python bench/bench_offload_hiding.py [--blocks 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys


def measure(blocks: int = 8, layers: int = 8) -> dict:
    """{layout: {hidden_pct, hidden_h2d_pct, t_resident_s, t_offload_s, transfer_s, h2d_GB, h2d_GBps, d2h_GB,
    planner_best_pct, offloaded_layers}} for the half and all offloaded layouts."""
    from inferix_core.cache.planner import estimate_offload
    from tests.cache.test_cache_cuda import offload_layouts, timed_blocks

    model, lat, spec, cfg, layouts = offload_layouts(layers)
    timed_blocks(model, cfg, lat, 2)  # warm-up: kernels, allocator, pinned pool
    timed_blocks(model, layouts["all"], lat, 2)
    t_res = sorted(timed_blocks(model, cfg, lat, blocks)[2] for _ in range(3))[1]
    results = {}
    for name, c in layouts.items():
        runs = [timed_blocks(model, c, lat, blocks) for _ in range(3)]
        st = runs[0][1].stats()
        t_off = sorted(r[2] for r in runs)[1]
        transfer = st["transfer_seconds"]
        results[name] = {
            "hidden_pct": 100 * (1.0 - max(0.0, t_off - t_res) / transfer) if transfer else None,
            "hidden_h2d_pct": st["hidden_h2d_pct"],
            "t_resident_s": t_res,
            "t_offload_s": t_off,
            "transfer_s": transfer,
            "h2d_GB": st["h2d_bytes"] / 1e9,
            "h2d_GBps": st["h2d_GBps"],
            "d2h_GB": st["d2h_bytes"] / 1e9,
            "prefetch_ready_rate": st["prefetch_ready_rate"],
            "planner_best_pct": 100 * estimate_offload(model.config, spec, c).best_hidden_fraction,
            "offloaded_layers": len(st["offloaded_layers"]),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 0
    results = {"device": torch.cuda.get_device_name(), **measure(args.blocks)}
    for name in ("half", "all"):
        r = results[name]
        print(
            f"offload {name} ({r['offloaded_layers']} layers): resident {r['t_resident_s']:.3f} s, offloaded "
            f"{r['t_offload_s']:.3f} s, transfers {r['transfer_s']:.3f} s ({r['h2d_GB']:.2f} GB at "
            f"{r['h2d_GBps'] or 0:.1f} GB/s), hidden {r['hidden_pct']:.1f} % (by stalls {r['hidden_h2d_pct'] or 0:.1f} %); "
            f"planner: at best {r['planner_best_pct']:.0f} %"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
