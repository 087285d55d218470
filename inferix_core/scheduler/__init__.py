from .flow_match import FlowMatchScheduler
from .unipc import FlowUniPCSolver

__all__ = ["FlowMatchScheduler", "FlowUniPCSolver"]
