"""InferixKVCacheConfig: the KV-cache settings node; emits a frozen `KVCacheConfig` on its own socket.

It only builds the dataclass (which validates itself). With a world model connected it also shows the
planner's memory plan (`inferix_core.api.plan_run`) at the model's own size, for a preview; Block Denoise
plans again for the real size and length and refuses a config over its budget before any model work.
"""

from __future__ import annotations

import logging
from typing import Any

from inferix_core.cache.spec import OFFLOAD_MODES, QUANTIZATIONS, KVCacheConfig
from inferix_core.workflow.settings import cache_config

from . import types
from .compat import io

log = logging.getLogger(__name__)

GIB = 1 << 30
PLAN_SIZE = (832, 480)  # (width, height) planned for models without a size of their own (Wan 2.1 T2V)
PLAN_SECONDS = 10.0  # run length planned for (global attention grows with it)


def build_config(
    window_frames: int, sink_frames: int, page_frames: int, offload: str, gpu_budget_gb: float, quantization: str
) -> KVCacheConfig:
    """The node's widget values as a KVCacheConfig (gpu_budget_gb 0 means no budget): `workflow.settings`."""
    return cache_config(
        {"window_frames": window_frames, "sink_frames": sink_frames, "page_frames": page_frames, "offload": offload,
         "gpu_budget_gb": gpu_budget_gb, "quantization": quantization}
    )  # fmt: skip


def describe(config: KVCacheConfig) -> str:
    """One readable line per setting, shown on the node."""
    window = "all earlier frames (global)" if config.window_frames == -1 else f"{config.window_frames} latent frames"
    budget = "none" if config.gpu_budget_bytes is None else f"{config.gpu_budget_bytes / GIB:.1f} GiB"
    return (
        f"window: {window}\nsink: {config.sink_frames} frames\npage: {config.page_frames or 'one block'}\n"
        f"offload: {config.offload}, GPU budget: {budget}\nquantization: {config.quantization}"
    )


class InferixKVCacheConfig(io.ComfyNode):
    """Settings node for the rolling KV cache (window, attention sink, paging, offload, quantization)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixKVCacheConfig",
            display_name="Inferix KV Cache Config",
            category=f"{types.CATEGORY}/cache",
            description="How the block-diffusion KV cache holds past frames. Feed it to Inferix Block Denoise; "
            "without it the cache is global, in full precision, on the GPU.",
            inputs=[
                io.Int.Input(
                    "window_frames",
                    default=-1,
                    min=-1,
                    max=4096,
                    step=1,
                    tooltip="Latent frames each block attends to, its own included (-1 = every earlier "
                    "frame). A finite window keeps memory flat for long videos; Self-Forcing "
                    "long runs use 21 (about 5 s).",
                ),
                io.Int.Input(
                    "sink_frames",
                    default=0,
                    min=0,
                    max=64,
                    step=1,
                    tooltip="First latent frames kept forever once the window slides (attention sink, "
                    "as in LongLive). Must be smaller than window_frames; 3 is typical.",
                ),
                io.Int.Input(
                    "page_frames",
                    default=0,
                    min=0,
                    max=64,
                    step=1,
                    tooltip="Latent frames per cache page (0 = one page per block). Smaller pages "
                    "offload and evict at a finer grain.",
                ),
                io.Combo.Input(
                    "offload",
                    options=list(OFFLOAD_MODES),
                    default="off",
                    tooltip="Keep cold pages in pinned CPU memory: 'auto' only when the GPU budget "
                    "would be exceeded, 'always' for every page outside the current block.",
                ),
                io.Float.Input(
                    "gpu_budget_gb",
                    default=0.0,
                    min=0.0,
                    max=1024.0,
                    step=0.5,
                    tooltip="GPU memory the KV cache may use, in GiB (0 = what the GPU has free). Block Denoise "
                    "refuses to start when the cache as configured does not fit, and says "
                    "which change would (shorter window, int8, offload).",
                ),
                io.Combo.Input(
                    "quantization",
                    options=list(QUANTIZATIONS),
                    default="none",
                    tooltip="Store cached K/V as int8 or int4 with per-channel scales (KIVI-style), "
                    "keeping the newest frames in full precision. Halves or quarters cache "
                    "memory at a small quality cost.",
                ),
                types.WorldModel.Input(
                    "world_model",
                    optional=True,
                    tooltip="Optional: show the memory plan for this model here (at its own "
                    "size, or 832x480, for 10 s). Block Denoise always checks the "
                    "plan for the real size and length.",
                ),
            ],
            outputs=[types.KVCacheConfig.Output("kv_cache", tooltip="Cache settings for Inferix Block Denoise.")],
        )

    @classmethod
    def validate_inputs(cls, window_frames: int | None = None) -> bool | str:
        # One input only: ComfyUI pins a validator's message on every input it names. The other inputs' ranges
        # are their widgets' min/max (checked by ComfyUI, pinned on each); sink < window is checked in execute.
        if window_frames is not None and window_frames != -1 and not 1 <= window_frames <= 4096:
            return f"window_frames must be -1 (global) or between 1 and 4096, got {window_frames}"
        return True

    @classmethod
    def execute(
        cls,
        window_frames: int,
        sink_frames: int,
        page_frames: int,
        offload: str,
        gpu_budget_gb: float,
        quantization: str,
        world_model: Any = None,
    ) -> io.NodeOutput:
        config = build_config(window_frames, sink_frames, page_frames, offload, gpu_budget_gb, quantization)
        text = describe(config)
        if world_model is not None:
            text += "\n\n" + plan_text(world_model, config)
        return io.NodeOutput(config, ui={"text": [text]})


def plan_text(world_model: Any, config: KVCacheConfig) -> str:
    """The memory plan at the model's size for PLAN_SECONDS, saying what was assumed and whether it fits."""
    from inferix_core.api import plan_run, seconds_to_blocks

    width, height = world_model.default_size or PLAN_SIZE
    num_blocks = seconds_to_blocks(world_model, PLAN_SECONDS)
    plan = plan_run(world_model, config, width, height, num_blocks)
    fits = plan.chosen == plan.requested
    verdict = "fits its budget" if fits else "does NOT fit its budget: Block Denoise will refuse it"
    log.info("KV cache plan at %dx%d, %g s: %s", width, height, PLAN_SECONDS, verdict)
    return f"planned for {width}x{height}, {PLAN_SECONDS:g} s ({num_blocks} blocks): {verdict}\n{plan.describe()}"
