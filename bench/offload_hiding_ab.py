"""Does the token-major stream or the fused norm kernels cost the offload its transfer hiding? (issue #19)

`tests/cache/test_cache_cuda.py::test_offload_transfer_hiding` measured 59.9 % of the transfers hidden with half
the layers offloaded (it asserts ≥ 90 %) once the blocks ran their norms as Triton kernels on a token-major
stream (docs/performance.md, "Wave 2, eighth pass"); with the q/k kernel alone it had passed. This runs that
test's measurement with the three levers on, off, and on again in one process, and prints each outcome.

    PYTHONPATH=. python bench/offload_hiding_ab.py

On the GPU image, run it from a copy of the repository without the pack's `__init__.py` (it imports PyAV).
"""

from __future__ import annotations

import logging
import sys
import time

from inferix_core.models.wan import causal_transformer as ct


def run(levers: bool) -> str:
    import tests.cache.test_cache_cuda as t

    ct.CausalWanTransformer.row_major_stream = levers
    ct.AttentionBlock.fused_norms = levers
    ct.SelfAttention.fused_norm_rope = levers
    props: dict = {}
    t0 = time.perf_counter()
    try:
        t.test_offload_transfer_hiding(props.__setitem__)
        outcome = "passed"
    except AssertionError as e:
        outcome = f"failed: {str(e).splitlines()[0][:100]}"
    return f"{outcome}; {props}; {time.perf_counter() - t0:.0f} s"


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
