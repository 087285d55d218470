"""LoadOptions: every setting of `load_world_model` but the model file, as one frozen object.

The node, the CLI and `inferix play` build one (`inferix_core.workflow.settings.load_options`) and hand it to
the loader; Python callers may still pass the same settings as keywords (`load_world_model(path, fp8=True)`),
which become a LoadOptions. What each setting does is said in `load_world_model`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from .lora import LoraArg

WEIGHTS_CHOICES = ("auto", "ema", "generator")


@dataclass(frozen=True)
class LoadOptions:
    family: str | None = "auto"  # "auto" (or None): read from the file (family_detect)
    weights: str = "auto"  # a training checkpoint's dict: auto (the family's authors'), ema, generator
    vae_path: str | None = None
    preview_decoder_path: str | None = None
    text_encoder_path: str | None = None
    dtype: str | torch.dtype = "auto"
    device: str = "auto"
    attention: str = "auto"
    num_heads: int | None = None
    fp8: bool = False  # block linears as fp8 GEMMs
    compile: bool = False  # torch.compile each block (and the Wan VAE's fused decode step on CUDA)
    resident_blocks: int | None = None  # block swap by hand; None = planned from gpu_memory, else all
    fp8_weights: bool = False  # block weights stored in e4m3, dequantized per call
    text_encoder_placement: str = "device"  # device, cpu or offload
    gpu_memory: int | None = None  # bytes: plan block swap for a card of this size
    lora: tuple[LoraArg, ...] = ()  # (path, strength) pairs merged into the weights at load
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora", tuple(self.lora or ()))  # a list or None from a caller: one spelling

    @classmethod
    def of(cls, options: LoadOptions | None = None, **settings: Any) -> LoadOptions:
        """`options` (or the defaults) with `settings` (the loader's keywords) laid over; an unknown name raises."""
        unknown = sorted(set(settings) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"load_world_model() got unexpected keyword argument(s) {', '.join(unknown)}")
        return replace(options or cls(), **settings)


__all__ = ["WEIGHTS_CHOICES", "LoadOptions"]
