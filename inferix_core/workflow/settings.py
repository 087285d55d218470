"""Widget values → the core's configs, in one place: the nodes, the CLI (`play`, `info`) and `inferix play`'s
workflow reading all build their LoadOptions, MemorySettings and KVCacheConfig here.

`widgets` is a mapping of a node's input names to values, as a workflow's API format holds them (Load World Model,
Memory Settings, KV Cache Config); a missing or empty value takes the node's default, as ComfyUI passes none for an
optional input a saved workflow lacks. File inputs hold names; `resolve(folder, name)` turns one into a path (the
node: ComfyUI's model folders; `inferix play`: $INFERIX_MODELS_DIR; the CLI: the path as given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..cache import KVCacheConfig
from ..errors import ConfigError
from ..models.lora import LoraArg
from ..models.memory import GIB, MemorySettings
from ..models.options import LoadOptions

BUNDLED = "bundled"
NONE = "none"
# Load World Model's file inputs → the ComfyUI model folder each is picked from
MODEL_FOLDERS = {
    "model": "diffusion_models",
    "vae": "vae",
    "preview_decoder": "vae_approx",
    "text_encoder": "text_encoders",
}
# Load World Model's other inputs and their defaults (the node's; LoadOptions' own)
LOADER_DEFAULTS: dict[str, Any] = {
    "dtype": "auto",
    "attention": "auto",
    "device": "auto",
    "fp8": False,
    "compile": False,
    "family": "auto",
    "weights": "auto",
    "cuda_graphs": False,
}
MEMORY_DEFAULTS: dict[str, Any] = {"gpu_memory_gb": 0.0, "resident_blocks": -1, "fp8_weights": False,
                                   "text_encoder": "device"}  # fmt: skip
CACHE_DEFAULTS: dict[str, Any] = {"window_frames": -1, "sink_frames": 0, "page_frames": 0, "offload": "off",
                                  "gpu_budget_gb": 0.0, "quantization": "none"}  # fmt: skip


def as_given(folder: str, name: str) -> str:
    """The CLI's `resolve`: a file argument is a path already."""
    return name


def model_file(name: str, value: str | None, resolve: Callable[[str, str], str] = as_given) -> str | None:
    """A Load World Model file input as a path: 'none' (and 'bundled' beside the model: the family's own) is None;
    the model 'bundled' stays 'bundled'."""
    if name != "model" and value in (None, "", NONE, BUNDLED):
        return None
    return resolve(MODEL_FOLDERS[name], value)


def _value(widgets: Mapping[str, Any], defaults: Mapping[str, Any], name: str) -> Any:
    value = widgets.get(name)
    return defaults[name] if value is None or value == "" else value


def memory_settings(widgets: Mapping[str, Any]) -> MemorySettings:
    """Memory Settings' widgets → MemorySettings (gpu_memory_gb 0 = no budget; resident_blocks -1 = planned)."""
    gpu_memory_gb = float(_value(widgets, MEMORY_DEFAULTS, "gpu_memory_gb"))
    resident_blocks = int(_value(widgets, MEMORY_DEFAULTS, "resident_blocks"))
    return MemorySettings(
        gpu_memory_gb=gpu_memory_gb if gpu_memory_gb > 0 else None,
        resident_blocks=None if resident_blocks == -1 else resident_blocks,  # < -1 is refused by MemorySettings
        fp8_weights=bool(_value(widgets, MEMORY_DEFAULTS, "fp8_weights")),
        text_encoder_placement=_value(widgets, MEMORY_DEFAULTS, "text_encoder"),
    )


def load_options(
    widgets: Mapping[str, Any],
    *,
    resolve: Callable[[str, str], str] = as_given,
    memory: MemorySettings | None = None,
    lora: Sequence[LoraArg] = (),
) -> LoadOptions:
    """Load World Model's widgets (all but `model`, see `model_file`), its memory input and LoRAs → LoadOptions."""
    get = lambda name: _value(widgets, LOADER_DEFAULTS, name)  # noqa: E731
    return LoadOptions(
        family=get("family"),
        weights=get("weights"),
        vae_path=model_file("vae", widgets.get("vae"), resolve),
        preview_decoder_path=model_file("preview_decoder", widgets.get("preview_decoder"), resolve),
        text_encoder_path=model_file("text_encoder", widgets.get("text_encoder"), resolve),
        dtype=get("dtype"),
        device=get("device"),
        attention=get("attention"),
        fp8=bool(get("fp8")),
        compile=bool(get("compile")),
        cuda_graphs=bool(get("cuda_graphs")),
        lora=tuple(lora or ()),
        **(memory or MemorySettings()).load_kwargs(),
    )


def cache_config(widgets: Mapping[str, Any]) -> KVCacheConfig:
    """KV Cache Config's widgets → KVCacheConfig (gpu_budget_gb 0 = no budget), with the node's messages."""
    window = int(_value(widgets, CACHE_DEFAULTS, "window_frames"))
    sink = int(_value(widgets, CACHE_DEFAULTS, "sink_frames"))
    if window == 0:
        raise ConfigError("window_frames must be -1 (global) or between 1 and 4096, got 0")
    if window != -1 and sink >= window:
        raise ConfigError(
            f"sink_frames ({sink}) must be smaller than window_frames ({window}); raise window_frames or lower sink_frames"
        )
    budget = float(_value(widgets, CACHE_DEFAULTS, "gpu_budget_gb"))
    return KVCacheConfig(
        window_frames=window,
        sink_frames=sink,
        page_frames=int(_value(widgets, CACHE_DEFAULTS, "page_frames")),
        offload=_value(widgets, CACHE_DEFAULTS, "offload"),
        gpu_budget_bytes=int(budget * GIB) if budget > 0 else None,
        quantization=_value(widgets, CACHE_DEFAULTS, "quantization"),
    )


__all__ = [
    "BUNDLED",
    "MODEL_FOLDERS",
    "NONE",
    "as_given",
    "cache_config",
    "load_options",
    "memory_settings",
    "model_file",
]
