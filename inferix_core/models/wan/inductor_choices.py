"""Inductor heuristics for the transformer's row reductions over the model width.

Why: every norm of a Wan block reduces over d features (1,536 for the 1.3B model), and Inductor keeps a
reduction *looped* (each row read twice: once for the statistics, once to normalise) above 1,024 features
(`InductorChoices.should_use_persistent_reduction`). A persistent reduction holds the row in registers and
reads it once. This handler lets inner reductions up to `limit` features be persistent; everything else is
Inductor's own choice. It changes which kernel Inductor writes, not the math (the same reductions, possibly a
different summation order: fp32 rounding level).

Used through `V.set_choices_handler`, which is per thread and read while Inductor generates code, so it must be
set in the thread that runs the first (compiling) call.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.virtualized import V

if TYPE_CHECKING:
    from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures


class PersistentRowReductions(InductorChoices):
    """Inductor's choices, with inner (row) reductions of up to `limit` elements kept persistent."""

    def __init__(self, limit: int = 2048) -> None:
        super().__init__()
        self.limit = limit

    def should_use_persistent_reduction(self, features: SIMDKernelFeatures, cooperative_reduction: bool) -> bool:
        if (
            inductor_config.triton.persistent_reductions
            and not cooperative_reduction
            and features.get_reduction_hint() == ReductionHint.INNER
            and V.graph.sizevars.statically_known_leq(features.reduction_numel, self.limit)
        ):
            return True
        return InductorChoices.should_use_persistent_reduction(features, cooperative_reduction)


def persistent_row_reductions(limit: int = 2048) -> AbstractContextManager[None]:
    """Set `PersistentRowReductions(limit)` as this thread's Inductor choices; the returned context restores."""
    return V.set_choices_handler(PersistentRowReductions(limit))
