"""A world model from Wan 2.1 transformer weights already in memory (e.g. a ComfyUI MODEL's patched weights).

`load_world_model` reads a file; this builds the same `WorldModel` from a state dict in any key layout
`checkpoint.py` knows (bare Wan names, ComfyUI's `diffusion_model.` / `model.diffusion_model.` prefixes,
diffusers, Self-Forcing). The weights must be plain floating tensors: a caller that holds fp8 weights with
scales dequantises them first (ComfyUI's own `convert_func` does). The family cannot be read from weights, so
it is an argument, as the registry's default is for a file without a name hint.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch

from ..errors import CheckpointLayoutError, ConfigError
from .fp8 import quantize_linears_fp8
from .registry import (
    WorldModel,
    build_transformer,
    get_family,
    load_text_encoder,
    maybe_compile,
    resolve_device,
    resolve_dtype,
)
from .wan.checkpoint import plan_keys
from .wan.layouts import EXPECTED_LAYOUTS_TEXT
from .wan.shapes import check_wan_shapes, infer_wan_config
from .wan.sources import DictSource

log = logging.getLogger(__name__)


def wan_state_from_tensors(
    tensors: Mapping[str, torch.Tensor],
    *,
    source: str,
    num_heads: int | None = None,
    text_len: int = 512,
    dtype: torch.dtype = torch.float32,
):
    """(canonical state dict in `dtype`, WanConfig, layout name) of Wan 2.1 T2V or I2V weights under any known layout."""
    plan, layout = plan_keys(DictSource(tensors, "state_dict", None), source)
    if plan.scales:
        raise CheckpointLayoutError(
            f"{source} still carries fp8 scales ({sorted(plan.scales)[0]}, ...): dequantise the weights first"
        )
    shapes = {k: tuple(tensors[s].shape) for k, s in plan.tensors.items()}
    if "patch_embedding.weight" not in shapes:
        raise CheckpointLayoutError(f"{source}: no tensor maps to 'patch_embedding.weight'. {EXPECTED_LAYOUTS_TEXT}")
    config = infer_wan_config(shapes, num_heads, text_len)
    if config.model_type == "flf2v":
        raise CheckpointLayoutError(
            f"{source} is a first-last-frame-to-video (flf2v) Wan model (img_emb.emb_pos: two start images); only "
            "single-image Wan 2.1 I2V and T2V weights run here."
        )
    check_wan_shapes(shapes, config, source)
    state = {}
    for canonical, stored in plan.tensors.items():
        t = tensors[stored]
        if not t.is_floating_point():
            raise CheckpointLayoutError(f"{source}: '{stored}' is {t.dtype}; only floating-point weights are supported")
        state[canonical] = t.detach().to(dtype)
    return state, config, layout.layout


def world_model_from_state_dict(
    tensors: Mapping[str, torch.Tensor],
    *,
    family: str = "self_forcing",
    source: str = "state dict",
    num_heads: int | None = None,
    text_len: int = 512,
    vae: object | None = None,
    preview_decoder: object | None = None,
    text_encoder_path: str | None = None,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "auto",
    attention: str = "auto",
    fp8: bool = False,
    compile: bool = False,
) -> WorldModel:
    """A `WorldModel` of `family` with these transformer weights, and an already built VAE / preview decoder.

    `device` may be a torch.device (e.g. the one ComfyUI picked); `dtype` 'auto' is bf16 on CUDA, else fp32,
    as for `load_world_model`. The weights are copied (the caller's tensors are not modified or kept).
    """
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    spec = get_family(family)
    state, config, layout = wan_state_from_tensors(
        tensors, source=source, num_heads=num_heads, text_len=text_len, dtype=dt
    )
    if config.has_image_input != (family == "wan21_i2v"):
        raise ConfigError(
            f"{source} is a Wan 2.1 I2V model (img_emb, cross_attn.k_img/v_img, in_dim 36); set family wan21_i2v"
            if config.has_image_input
            else f"{source} has no image-conditioning weights (img_emb, cross_attn.k_img): family wan21_i2v needs them"
        )
    transformer = build_transformer(config, state, dev, dt, attention)
    if fp8:
        quantize_linears_fp8(transformer)
    text = load_text_encoder(text_encoder_path, config.text_len, dev, dt) if text_encoder_path else None
    model = WorldModel(
        family,
        config,
        spec.sampling,
        spec.cache,
        transformer,
        vae,
        preview_decoder,
        text,
        fps=spec.fps,
        source=f"{source} ({layout} layout)",
    )
    log.info("world model from %s: %d layers, dim %d, family %s", source, config.num_layers, config.dim, family)
    return maybe_compile(model, compile)
