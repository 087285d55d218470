from .flow_match import FlowMatchScheduler, FlowMatchStepOutput
from .sampling import SamplingConfig

__all__ = ["FlowMatchScheduler", "FlowMatchStepOutput", "SamplingConfig"]
