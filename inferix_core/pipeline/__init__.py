from .block_diffusion import (
    BlockDiffusionPipeline,
    BlockOutput,
    GenerationRequest,
    PipelineHooks,
    SamplingConfig,
    SeededNoise,
)

__all__ = [
    "BlockDiffusionPipeline",
    "BlockOutput",
    "GenerationRequest",
    "PipelineHooks",
    "SamplingConfig",
    "SeededNoise",
]
