from .flow_match import FlowMatchScheduler, FlowMatchStepOutput
from .sampling import SamplingConfig
from .unipc import FlowUniPCSolver

__all__ = ["FlowMatchScheduler", "FlowMatchStepOutput", "FlowUniPCSolver", "SamplingConfig"]
