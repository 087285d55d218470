from .flow_match import FlowMatchScheduler, FlowMatchStepOutput

__all__ = ["FlowMatchScheduler", "FlowMatchStepOutput"]
