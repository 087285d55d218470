"""SamplingConfig: how a model family samples (the few-step list, warping, shift, block size).

It is plain configuration of the scheduler and the block loop, so it lives at the scheduler's layer:
the model registry (which gives each family its defaults) and the pipeline (which runs it) both import it
from here without importing each other. `inferix_core.pipeline` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    """How a family samples: few-step list, warping, shift, block size (defaults: Self-Forcing)."""

    denoising_steps: tuple[int, ...] = (1000, 750, 500, 250)
    warp_denoising_steps: bool = True
    shift: float = 5.0
    num_train_timesteps: int = 1000
    block_frames: int = 3  # latent frames per block
    context_noise: int = 0  # timestep of the clean context pass (no noise is added, as in the reference)
    independent_first_frame: bool = False  # a separate 1-frame first block (image-conditioned models)

    def __post_init__(self) -> None:
        object.__setattr__(self, "denoising_steps", tuple(int(s) for s in self.denoising_steps))
        if not self.denoising_steps:
            raise ConfigError("denoising_steps is empty; give at least one timestep such as (1000, 750, 500, 250)")
        if self.block_frames < 1:
            raise ConfigError(f"block_frames must be >= 1, got {self.block_frames}")
