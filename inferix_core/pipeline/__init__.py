from .block_diffusion import (
    BlockDiffusionPipeline,
    BlockOutput,
    FirstFrameEncoder,
    GenerationRequest,
    PipelineHooks,
    SamplingConfig,
    SeededNoise,
)

__all__ = [
    "BlockDiffusionPipeline",
    "BlockOutput",
    "FirstFrameEncoder",
    "GenerationRequest",
    "PipelineHooks",
    "SamplingConfig",
    "SeededNoise",
]
