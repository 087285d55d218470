"""Inductor heuristics for the transformer's row reductions over the model width: a measured lever, not built in.

Every norm of a Wan block reduces over d features (1,536 for the 1.3B model), and Inductor keeps a reduction
*looped* (each row read twice: once for the statistics, once to normalise) above 1,024 features
(`InductorChoices.should_use_persistent_reduction`). `PersistentRowReductions` lets reductions of up to `limit`
elements with the given hints be persistent (the row held in registers, read once); the rest stays Inductor's
choice. The same math, possibly another summation order.

Measured on the H200 (docs/performance.md, "Wave 2, sixth pass"): alone, the adaLN LayerNorm + modulation step
runs 1.8x faster persistent, but in the whole 81-frame run its kernels are DEFAULT-hinted (a broadcast
modulation read) and 1.6x *slower* persistent, and the one INNER-hinted norm gains nothing; so compile_blocks
keeps Inductor's heuristics and this stays a tool of `bench_block_elementwise.py` and `profile_engine.py`.

`V.set_choices_handler` is per thread and read while Inductor generates code: set it in the thread that makes
the first (compiling) call.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.virtualized import V

if TYPE_CHECKING:
    from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures

# The reduction hints a row norm gets: INNER where every read runs along the row; Inductor marks a fused
# kernel DEFAULT when one of its reads (a broadcast modulation, say) does not
ROW_HINTS: tuple[str, ...] = ("INNER",)
# What the handlers decided, by (hint, reduction size, persistent): for profiles and tests
DECISIONS: Counter = Counter()


class PersistentRowReductions(InductorChoices):
    """Inductor's choices, with reductions of up to `limit` elements and a hint in `hints` kept persistent."""

    def __init__(self, limit: int = 2048, hints: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.hints = tuple(getattr(ReductionHint, h) for h in (ROW_HINTS if hints is None else hints))

    def should_use_persistent_reduction(self, features: SIMDKernelFeatures, cooperative_reduction: bool) -> bool:
        hint = features.get_reduction_hint()
        ours = (
            inductor_config.triton.persistent_reductions
            and not cooperative_reduction
            and hint in self.hints
            and V.graph.sizevars.statically_known_leq(features.reduction_numel, self.limit)
        )
        chosen = bool(ours) or InductorChoices.should_use_persistent_reduction(features, cooperative_reduction)
        DECISIONS[(hint.name, str(features.reduction_numel), chosen)] += 1
        return chosen


def persistent_row_reductions(limit: int = 2048, hints: tuple[str, ...] | None = None) -> AbstractContextManager[None]:
    """Set `PersistentRowReductions(limit, hints)` as this thread's Inductor choices; the returned context restores."""
    return V.set_choices_handler(PersistentRowReductions(limit, hints))
