"""The families: which checkpoint runs with which sampling and cache defaults, in one table (docs/models.md says
where each setting comes from). models/registry.py loads a file as one of them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..cache import KVCacheConfig
from ..errors import ConfigError
from ..scheduler import SamplingConfig
from .matrix_game2 import MATRIX_GAME2_VARIANTS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    sampling: SamplingConfig
    cache: KVCacheConfig
    fps: int = 16
    # which dict of a training checkpoint the authors' inference loads (weights="auto"): "ema" or "generator"
    weights: str = "ema"
    reference: str = ""  # repo@commit file(s) the settings come from (docs/models.md has the details)


_SF_STEPS = (1000, 750, 500, 250)


FAMILIES: dict[str, Family] = {
    "self_forcing": Family(
        "self_forcing",
        "Self-Forcing (Wan 2.1 T2V 1.3B, 4 steps per 3-frame block, global attention)",
        SamplingConfig(_SF_STEPS, warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(),
        weights="ema",
        reference="guandeh17/Self-Forcing@33593df configs/self_forcing_dmd.yaml, README (--use_ema)",
    ),
    "longlive": Family(
        "longlive",
        "LongLive (Self-Forcing lineage tuned for long streams: 12-frame window with a 3-frame sink)",
        SamplingConfig(_SF_STEPS, warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(window_frames=12, sink_frames=3),
        weights="generator",
        reference="NVlabs/LongLive@e52d9ef (v1.0) configs/longlive_inference.yaml (use_ema: false)",
    ),
    "longlive2": Family(
        "longlive2",
        "LongLive 2.0 (Wan 2.2 TI2V-5B, 704x1280: UniPC 4 steps per 8-frame block, 32-frame window with an "
        "8-frame sink; image start by a clean first latent; shots: pinned shot sinks and RoPE offset, docs/wan22.md)",
        SamplingConfig(
            (999, 937, 833, 624),
            warp_denoising_steps=False,
            shift=5.0,
            block_frames=8,
            solver="unipc",
            shot_sinks=True,
            shot_rope_offset=8.0,
        ),
        KVCacheConfig(window_frames=32, sink_frames=8),
        fps=24,
        weights="generator",  # use_ema: false
        reference="NVlabs/LongLive@7860ad9 (main) configs/inference.yaml, pipeline/causal_diffusion_inference.py",
    ),
    "causvid": Family(
        "causvid",
        "CausVid (3-step DMD causal Wan, shift 8; step list from the authors' DMD config, not warped)",
        SamplingConfig((1000, 757, 522), warp_denoising_steps=False, shift=8.0, block_frames=3),
        KVCacheConfig(),
        weights="generator",
        reference="tianweiy/CausVid@ca21150 configs/wan_causal_dmd.yaml, causvid/models/wan/wan_wrapper.py",
    ),
    "causal_forcing_chunkwise": Family(
        "causal_forcing_chunkwise",
        "Causal-Forcing chunk-wise (4 steps per 3-frame block, global attention)",
        SamplingConfig(_SF_STEPS, warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(),
        weights="generator",  # README: the chunk-wise command has no --use_ema
        reference="thu-ml/Causal-Forcing@1fc7bbc configs/causal_forcing_dmd_chunkwise.yaml, README",
    ),
    "causal_forcing_framewise": Family(
        "causal_forcing_framewise",
        "Causal-Forcing frame-wise (4 steps per 1-frame block, global attention)",
        SamplingConfig(_SF_STEPS, warp_denoising_steps=True, shift=5.0, block_frames=1),
        KVCacheConfig(),
        weights="ema",  # README: --use_ema
        reference="thu-ml/Causal-Forcing@1fc7bbc configs/causal_forcing_dmd_framewise.yaml, README",
    ),
    "causal_forcing_framewise_2step": Family(
        "causal_forcing_framewise_2step",
        "Causal-Forcing++ frame-wise 2-step (block 0 with 4 steps, then 2 steps per 1-frame block)",
        SamplingConfig(
            (1000, 500), warp_denoising_steps=True, shift=5.0, block_frames=1, first_block_denoising_steps=_SF_STEPS
        ),
        KVCacheConfig(),
        weights="ema",
        reference="thu-ml/Causal-Forcing@1fc7bbc configs/causal_forcing_dmd_framewise_2step.yaml, README",
    ),
    "causal_forcing_framewise_1step": Family(
        "causal_forcing_framewise_1step",
        "Causal-Forcing++ frame-wise 1-step (block 0 with 4 steps, then 1 step per 1-frame block)",
        SamplingConfig(
            (1000,), warp_denoising_steps=True, shift=5.0, block_frames=1, first_block_denoising_steps=_SF_STEPS
        ),
        KVCacheConfig(),
        weights="ema",
        reference="thu-ml/Causal-Forcing@1fc7bbc configs/causal_forcing_dmd_framewise_1step.yaml, README",
    ),
    "krea": Family(
        "krea",
        "Krea Realtime 14B (Wan 2.1 14B Self-Forcing distill; 5 steps, KV cache rebuilt from 3 clean frames per block)",
        SamplingConfig(
            (1000, 750, 500, 250, 0),
            warp_denoising_steps=True,
            shift=5.0,
            block_frames=3,
            kv_recompute_frames=3,
            keep_first_frame=False,  # GenerateParams' default: the first context frame re-encoded from pixels
        ),
        KVCacheConfig(),
        weights="generator",  # a flat safetensors file: there is only one set of weights
        reference="krea-ai/realtime-video@acf4b7b release_server.py (GenerateParams, recompute_kv_cache, "
        "get_clean_context_frames), v2v.py",
    ),
    "matrix_game2": Family(  # variant (universal / gta_drive / templerun) from the weights: models/matrix_game2.py
        "matrix_game2",
        "Matrix-Game 2.0 (image-started causal Wan 2.1 1.3B driven by keyboard and mouse)",
        MATRIX_GAME2_VARIANTS["universal"].sampling,
        MATRIX_GAME2_VARIANTS["universal"].cache,
    ),
    "wan21_i2v": Family(  # plain Wan 2.1 I2V weights (Wan-AI/Wan2.1-I2V-14B-480P/-720P, ComfyUI repacks)
        "wan21_i2v",
        "Wan 2.1 I2V (text prompt + start image + CLIP vision; causal blocks with Self-Forcing's 4 warped steps. The "
        "released 14B I2V files are bidirectional 40-step models: run causally they need a causal distillation to look "
        "right, see docs/models.md)",
        SamplingConfig(_SF_STEPS, warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(),
        weights="generator",  # flat safetensors files: one set of weights
        reference="Wan-Video/Wan2.1 wan/modules/model.py (WanI2VCrossAttention) as copied in guandeh17/Self-Forcing@33593df",
    ),
    "bundled": Family(
        "bundled",
        "Inferix bundled toy world model (action-conditioned, CPU-sized)",
        SamplingConfig(),
        KVCacheConfig(),
    ),
}


# What a prompt switch does with the cached K/V, by family. "window": LongLive's KV re-cache (NVlabs/LongLive
# v1.0 pipeline/interactive_causal_inference.py `_recache_after_switch`, global sink), in interactive sessions
# and prompt schedules alike (`BlockDiffusionPipeline.recache_window`). Families not named: an interactive
# session re-caches block by block ("blocks", inferix_core/clients/session.py), a prompt schedule switches hard.
RECACHE_STYLE_BY_FAMILY = {"longlive": "window"}


def list_families() -> list[str]:
    return list(FAMILIES)


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family '{name}'; expected one of {list_families()}")
    return FAMILIES[name]
