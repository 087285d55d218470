"""The transformer's cost row for `memory.compose` (the formulas stay in cache/plan_costs.py).

`TransformerCost`: the weights on the device per resident block count (block swap), kept; one block call's
activations, transient. The model config states it (`WanConfig.cost_row`), so the planner below this layer
(cache/planner.py) composes it without importing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..cache.plan_costs import activation_bytes, transformer_weight_bytes
from ..cache.spec import KVCacheConfig, KVCacheSpec
from ..memory import Cost, PlanInput

TRANSFORMER = "transformer"


@dataclass(frozen=True)
class TransformerCost:
    """Options: the resident block counts, most first (None: every block, no block swap)."""

    model_config: object
    spec: KVCacheSpec
    cache_config: KVCacheConfig
    elem_bytes: int
    resident: tuple[int | None, ...] = (None,)
    fp8_block_weights: bool = False
    name: str = TRANSFORMER

    def options(self, given: PlanInput) -> Sequence[Cost]:
        acts = activation_bytes(self.model_config, self.spec, self.cache_config)
        return [
            Cost(
                self.name,
                transformer_weight_bytes(self.model_config, self.elem_bytes, r, self.fp8_block_weights),
                acts,
                option=r,
                label="every block resident" if r is None else f"{r} blocks resident",
                exact=False,
            )
            for r in self.resident
        ]
