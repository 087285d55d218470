"""The Inferix ComfyUI node pack: NODE_CLASS_MAPPINGS built from NODES, keyed by each schema's node_id.

Installed as `inferix_nodes` (never as a top-level `nodes`, which is ComfyUI's own module) and
imported relatively as `.nodes` by the pack's root `__init__.py` inside ComfyUI. Node modules import
each other relatively and the engine absolutely (`inferix_core`).
"""

from __future__ import annotations

from . import comfy_runtime, live_controls
from .block_denoise import InferixBlockDenoise
from .branch_world import InferixBranchWorld
from .compat import HAVE_COMFY_API, ComfyExtension
from .core_model import InferixWorldModelFromCoreModel
from .kv_cache_config import InferixKVCacheConfig
from .load_lora import InferixLoadWorldModelLoRA
from .load_world_model import InferixLoadWorldModel
from .lvbench_prompts import InferixLVBenchPrompts
from .memory_settings import InferixMemorySettings
from .reports import InferixLVBenchScore, InferixProfileReport
from .schedules import InferixActionSchedule, InferixPromptSchedule
from .stream_out import InferixStreamOut
from .stream_settings import InferixStreamSettings
from .vae_decode import InferixVAEDecode
from .world_state import InferixLoadWorldState, InferixSaveWorldState

comfy_runtime.register_model_folders()
live_controls.register_route()  # POST /inferix/control inside ComfyUI (live keyboard/mouse control)

NODES = [
    InferixLoadWorldModel,
    InferixMemorySettings,
    InferixLoadWorldModelLoRA,
    InferixWorldModelFromCoreModel,
    InferixKVCacheConfig,
    InferixPromptSchedule,
    InferixLVBenchPrompts,
    InferixActionSchedule,
    InferixStreamSettings,
    InferixBlockDenoise,
    InferixBranchWorld,
    InferixVAEDecode,
    InferixStreamOut,
    InferixSaveWorldState,
    InferixLoadWorldState,
    InferixProfileReport,
    InferixLVBenchScore,
]


def _schema(node: type) -> object:
    # real V3 classes finalize their schema through GET_SCHEMA (it also fills the V1 attributes)
    return node.GET_SCHEMA()


NODE_CLASS_MAPPINGS = {_schema(n).node_id: n for n in NODES}
NODE_DISPLAY_NAME_MAPPINGS = {_schema(n).node_id: _schema(n).display_name for n in NODES}


class InferixExtension(ComfyExtension):
    """The same nodes for ComfyUI's V3 loader (`comfy_entrypoint`); a ComfyUI that finds NODE_CLASS_MAPPINGS
    first registers them from there, so both routes give one set of nodes."""

    async def get_node_list(self) -> list[type]:
        return list(NODES)


async def comfy_entrypoint() -> InferixExtension:
    """ComfyUI's V3 entry point (`comfy_api.latest`): the pack as one extension."""
    return InferixExtension()


__all__ = [
    "HAVE_COMFY_API",
    "NODES",
    "NODE_CLASS_MAPPINGS",
    "NODE_DISPLAY_NAME_MAPPINGS",
    "InferixExtension",
    "comfy_entrypoint",
]
