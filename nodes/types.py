"""Custom socket types of the pack: each carries one frozen core object between nodes.

A socket never carries a dict of settings (see STYLE.md, the WanVideoWrapper counter-example): the
object on the wire is a frozen dataclass, the core's own type except StreamSettings (named below).
"""

from __future__ import annotations

from .compat import io

# inferix_core.models.registry.WorldModel: transformer + VAE + text encoder + family defaults
WorldModel = io.Custom("INFERIX_WORLD_MODEL")
# inferix_core.cache.spec.KVCacheConfig
KVCacheConfig = io.Custom("INFERIX_KV_CACHE_CONFIG")
# inferix_core.api.PromptSchedule: (seconds, prompt) entries
PromptSchedule = io.Custom("INFERIX_PROMPT_SCHEDULE")
# inferix_core.api.ActionSchedule: (seconds, action name) entries for interactive world models
ActionSchedule = io.Custom("INFERIX_ACTION_SCHEDULE")
# nodes.stream_settings.StreamSettings: where Block Denoise streams its mp4 (relative to the output folder)
StreamSettings = io.Custom("INFERIX_STREAM_SETTINGS")
# inferix_core.models.memory.MemorySettings: block swap, fp8 weight storage, text-encoder placement
MemorySettings = io.Custom("INFERIX_MEMORY_SETTINGS")
# inferix_core.engine.world_state.WorldState: a saved world (KV cache, prompt, noise, decoder cache) to continue
WorldState = io.Custom("INFERIX_WORLD_STATE")
# inferix_core.api.VideoResult: latents, uint8 frames [T, H, W, 3], fps, per-block profile
Video = io.Custom("INFERIX_VIDEO")
# what a video input takes: ours, or core ComfyUI's VIDEO (nodes.core_video.as_inferix_video reads either)
VideoIn = io.Custom("INFERIX_VIDEO,VIDEO")

CATEGORY = "Inferix"
