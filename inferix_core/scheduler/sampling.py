"""SamplingConfig: how a model family samples (the few-step list, warping, shift, block size).

It is plain configuration of the scheduler and the block loop, so it lives at the scheduler's layer:
the model registry (which gives each family its defaults) and the pipeline (which runs it) both import it
from here without importing each other. `inferix_core.pipeline` re-exports it.
"""

from __future__ import annotations

import math
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
    # Causal-Forcing++ 1/2-step models denoise block 0 with their own longer list
    # (`denoising_step_list_first_chunk` in thu-ml/Causal-Forcing pipeline/causal_inference.py); None = same list.
    first_block_denoising_steps: tuple[int, ...] | None = None
    # Krea Realtime's KV recompute (`kv_cache_num_frames`, krea-ai/realtime-video release_server.py
    # `recompute_kv_cache`): 0 = off. K > 0: before each block the cache is rebuilt from clean latents alone,
    # the first latent frame followed by the newest K − 1, at positions 0..L−1 (L = min(frames so far, K)),
    # in block-causal chunks at t = 0; the block is then denoised at position L and gets no context pass.
    kv_recompute_frames: int = 0
    # With kv_recompute_frames > 0: True keeps the first latent frame as the first context frame for good;
    # False (Krea's server default, `GenerateParams.keep_first_frame`, release_server.py:327) replaces it, once
    # (block − 1)·block_frames ≥ K, by the oldest decoded pixel frame still in the window, encoded alone
    # (`get_clean_context_frames`, release_server.py:563-576): the run then needs the Wan VAE in the loop
    # (BlockDiffusionPipeline's first_frame_encoder). The `krea` family ships False.
    keep_first_frame: bool = True
    # "renoise": x0 prediction, then re-noise to the next step (Self-Forcing lineage, one noise draw per step).
    # "unipc": the flow UniPC multistep solver (LongLive 2.0 / Wan 2.2), deterministic after the initial noise;
    # denoising_steps must then be its timesteps for len(steps) and shift (e.g. 4 steps, shift 5: 999,937,833,624).
    solver: str = "renoise"
    # LongLive 2.0 multi-shot (NVlabs/LongLive main configs/inference.yaml `multi_shot_sink`,
    # `multi_shot_rope_offset`): at the first block of each new shot (GenerationRequest.shot_blocks) the cache
    # pins that block's first min(sink, block) frames after its context pass (cache/shots.py), and the RoPE
    # temporal positions of that block and every later one are shifted by k * shot_rope_offset (k-th shot).
    shot_sinks: bool = False
    shot_rope_offset: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "denoising_steps", tuple(int(s) for s in self.denoising_steps))
        if self.first_block_denoising_steps is not None:
            object.__setattr__(
                self, "first_block_denoising_steps", tuple(int(s) for s in self.first_block_denoising_steps)
            )
        if not self.denoising_steps or self.first_block_denoising_steps == ():
            raise ConfigError("denoising_steps is empty; give at least one timestep such as (1000, 750, 500, 250)")
        if self.solver not in ("renoise", "unipc"):
            raise ConfigError(f"unknown solver '{self.solver}'; expected 'renoise' or 'unipc'")
        if self.block_frames < 1:
            raise ConfigError(f"block_frames must be >= 1, got {self.block_frames}")
        if self.kv_recompute_frames < 0:
            raise ConfigError(f"kv_recompute_frames must be >= 0 (0 = off), got {self.kv_recompute_frames}")
        if not math.isfinite(self.shot_rope_offset):
            raise ConfigError(f"shot_rope_offset must be a finite number of frames, got {self.shot_rope_offset}")
        if self.kv_recompute_frames and (self.shot_sinks or self.shot_rope_offset):
            raise ConfigError("kv_recompute_frames cannot be combined with shot sinks or a shot RoPE offset")
        if self.kv_recompute_frames and self.independent_first_frame:
            raise ConfigError("kv_recompute_frames and independent_first_frame cannot be combined")
        if self.kv_recompute_frames == 1 and not self.keep_first_frame:
            raise ConfigError(  # their `[:, -K + 1:]` is `[:, 0:]` at K = 1: every frame, more than the cache holds
                "kv_recompute_frames=1 with keep_first_frame=False is not a window Krea's code can run; "
                "use kv_recompute_frames >= 2 or keep_first_frame=True"
            )
