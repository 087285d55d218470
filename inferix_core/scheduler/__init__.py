from .flow_match import FlowMatchScheduler, FlowMatchStepOutput
from .protocol import BlockSolve, Scheduler, StepOutput, make_scheduler
from .sampling import SamplingConfig
from .unipc import FlowUniPCSolver

__all__ = [
    "BlockSolve",
    "FlowMatchScheduler",
    "FlowMatchStepOutput",
    "FlowUniPCSolver",
    "SamplingConfig",
    "Scheduler",
    "StepOutput",
    "make_scheduler",
]
