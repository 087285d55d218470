"""The KV cache's cost row for `memory.compose` (the formulas stay in plan_costs.py).

`KVCost`: the requested cache, then, asked with a budget (the room the others leave it), the alternatives
exactness first: offload keeps results bitwise, int8 / int4 pages change them a little, a shorter window changes
what the model sees. The transformer's row is models/cost.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CacheBudgetError
from ..memory import Cost, PlanInput
from .plan_costs import cache_cost
from .spec import KVCacheConfig, KVCacheSpec

KV = "kv cache"


@dataclass(frozen=True)
class KVCost:
    config: KVCacheConfig
    spec: KVCacheSpec
    name: str = KV

    def options(self, given: PlanInput) -> Sequence[Cost]:
        """Each option's `option` is (its KVCacheConfig, its CacheCost); `kept_bytes` −1: cannot be built."""
        rows = [self.row("as requested", self.config)]
        if given.budget_bytes is None:
            return rows
        avail = given.budget_bytes
        window = largest_window(
            dataclasses.replace(self.config, offload="off", gpu_budget_bytes=None), self.spec, avail
        )
        return rows + [self.row(label, config) for label, config in alternatives(self.config, avail, window)]

    def row(self, label: str, config: KVCacheConfig) -> Cost:
        try:
            cost = cache_cost(config, self.spec)
        except CacheBudgetError as exc:  # offload cannot even fit its two staging layers: the reason is the formula
            return Cost(self.name, -1, 0, option=(config, None), label=label, formula=str(exc))
        return Cost(self.name, cost.device_bytes, 0, cost.host_bytes, (config, cost), label, formula=cost.formula)


def alternatives(config: KVCacheConfig, avail: int, window: int | None) -> list[tuple[str, KVCacheConfig]]:
    """Cache configurations to try when the request does not fit, exactness first."""
    options: list[tuple[str, KVCacheConfig]] = []
    if avail > 0:
        options.append(
            ("offload", dataclasses.replace(config, offload="auto", gpu_budget_bytes=avail, quantization="none"))
        )
    base = dataclasses.replace(config, offload="off", gpu_budget_bytes=None)
    options += [
        ("int8", dataclasses.replace(base, quantization="int8")),
        ("int4", dataclasses.replace(base, quantization="int4")),
    ]
    if window is not None:
        options.append((f"window_frames={window}", dataclasses.replace(base, window_frames=window)))
    return options


def largest_window(config: KVCacheConfig, spec: KVCacheSpec, avail: int) -> int | None:
    """Largest resident window (≥ sink + block) whose cache fits `avail` bytes, or None."""
    top = spec.max_frames if config.is_global else config.window_frames
    lowest = config.sink_frames + spec.block_frames
    for w in range((top or lowest) - 1, lowest - 1, -1):
        if cache_cost(dataclasses.replace(config, window_frames=w), spec).device_bytes <= avail:
            return w
    return None
