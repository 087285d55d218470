from .flow_match import FlowMatchScheduler

__all__ = ["FlowMatchScheduler"]
