"""The memory plan of a run: components state their costs (`CostModel`), `compose` chooses (design §4)."""

from .plan import Cost, CostModel, Fixed, MemoryPlan, PlanInput, compose, peak_bytes

__all__ = ["Cost", "CostModel", "Fixed", "MemoryPlan", "PlanInput", "compose", "peak_bytes"]
