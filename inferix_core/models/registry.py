"""The loading API in one place: the handle (`handle.py`), its options (`options.py`), the loader (`loader.py`),
the family table (`families.py`) and the components (`components.py`), re-exported for the modules, scripts and
docs that import them from here."""

from __future__ import annotations

from .components import (
    build_transformer,
    load_text_encoder,
    load_vae,
    loader_vae_decode_options,
    loader_vae_stream_slicing,
    set_attention_backend,
)
from .families import FAMILIES, RECACHE_STYLE_BY_FAMILY, Family, get_family, list_families
from .handle import WorldModel
from .loader import (
    load_world_model,
    maybe_compile,
    planned_resident_blocks,
    resolve_device,
    resolve_dtype,
    resolve_family,
)
from .options import WEIGHTS_CHOICES, LoadOptions

__all__ = [
    "FAMILIES",
    "RECACHE_STYLE_BY_FAMILY",
    "WEIGHTS_CHOICES",
    "Family",
    "LoadOptions",
    "WorldModel",
    "build_transformer",
    "get_family",
    "list_families",
    "load_text_encoder",
    "load_vae",
    "load_world_model",
    "loader_vae_decode_options",
    "loader_vae_stream_slicing",
    "maybe_compile",
    "planned_resident_blocks",
    "resolve_device",
    "resolve_dtype",
    "resolve_family",
    "set_attention_backend",
]
