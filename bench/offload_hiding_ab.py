"""Does the token-major stream or the fused norm kernels cost the offload its transfer hiding? (issue #19)

`tests/cache/test_cache_cuda.py::test_offload_transfer_hiding` (the measurement is now
bench/bench_offload_hiding.py) measured 59.9 % of the transfers hidden with half the layers offloaded (the target
is ≥ 90 %) once the blocks ran their norms as Triton kernels on a token-major stream (docs/performance.md,
"Wave 2, eighth pass"); with the q/k kernel alone it had passed. This runs that
measurement with the three levers on, off, and on again in one process, and prints each outcome.

    PYTHONPATH=. python bench/offload_hiding_ab.py

On the GPU image, run it from a copy of the repository without the pack's `__init__.py` (it imports PyAV).
"""

from __future__ import annotations

import logging
import sys
import time

from inferix_core.models.wan import causal_transformer as ct


def run(levers: bool) -> str:
    from bench.bench_offload_hiding import measure

    ct.CausalWanTransformer.row_major_stream = levers
    ct.AttentionBlock.fused_norms = levers
    ct.SelfAttention.fused_norm_rope = levers
    t0 = time.perf_counter()
    hidden = {name: round(r["hidden_pct"] or 0, 1) for name, r in measure().items()}
    return f"hidden % {hidden} (targets: half ≥ 90, all ≥ 50); {time.perf_counter() - t0:.0f} s"


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU (the offload's copies and their hiding are measured with CUDA events)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # the test logs each layout's numbers
    for name, levers in (("levers on", True), ("levers off (as before)", False), ("levers on again", True)):
        print(f"== {name}: {run(levers)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
