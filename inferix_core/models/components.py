"""The pieces a world model is loaded from, each on its own: the transformer (stored fp8 kept, attention backend
set), the VAE (decode options and stream slicing for its device), the preview decoder and the text encoder."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import ConfigError
from .block_swap import enable_block_swap
from .fp8 import FP8_DTYPE, FP8WeightLinear, quantize_linears_fp8
from .wan.causal_transformer import CausalWanTransformer
from .wan.config import WanConfig

log = logging.getLogger(__name__)


def loader_vae_decode_options(device: torch.device | str, compile: bool = False):
    """The Wan VAE decode options `load_world_model` gives a VAE on `device` (the benchmark uses the same).

    On CUDA `VAEDecodeOptions.fast()`, compiled too with compile=True; on the CPU None (the reference path).
    """
    from ..vae.config import VAEDecodeOptions

    return VAEDecodeOptions.fast(compile=compile) if torch.device(device).type == "cuda" else None


def loader_vae_stream_slicing(vae, device: torch.device | str):
    """How `load_world_model` has a VAE split its streamed decode (the benchmark uses the same).

    On CUDA a Wan 2.1 VAE decodes one latent frame per call with the previous state released
    (`vae.memory.CUDA_STREAM_SLICING`): the same frames, 1 % slower end to end and 3.75 GiB less at 480×832
    (docs/performance.md). Elsewhere, and for the Wan 2.2 VAE, the VAE's own.
    """
    from ..vae import WanVAE
    from ..vae.memory import CUDA_STREAM_SLICING

    if torch.device(device).type == "cuda" and type(vae) is WanVAE:
        return CUDA_STREAM_SLICING
    return vae.stream_slicing


def build_transformer(
    config: WanConfig,
    state: dict,
    device,
    dtype,
    attention: str,
    resident_blocks: int | None = None,
    fp8: bool = False,
    fp8_weights: bool = False,
) -> CausalWanTransformer:
    with torch.device("meta"):
        model = CausalWanTransformer(config)
    if fp8_weights:
        use_stored_fp8(model, state, dtype)
    model.load_state_dict(state, strict=True, assign=True)
    if fp8_weights:  # block linears not stored in fp8 are quantized now (on the host, before any move)
        quantize_linears_fp8(model, weight_only=True)
    if resident_blocks is not None and resident_blocks < config.num_layers:
        # swapped blocks go to pinned host memory before anything moves, so the device never holds them all
        model = model.to(dtype=dtype).eval().requires_grad_(False)
        if fp8:  # quantize on the host, so the streamed blocks are fp8 too (half the bytes per copy)
            quantize_linears_fp8(model)
        enable_block_swap(model, resident_blocks, device)
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    set_attention_backend(model, attention)
    return model


def use_stored_fp8(model: torch.nn.Module, state: dict, dtype: torch.dtype) -> None:
    """Turn the block linears whose stored weight is e4m3 into `FP8WeightLinear`s holding it as is.

    The state's `<layer>.scale_weight` becomes the layer's `weight_scale`; e4m3 weights outside the
    blocks (rare) are dequantized to `dtype` as the loader would have done.
    """
    kept = 0
    for key in [k for k, t in state.items() if k.endswith(".weight") and t.dtype == FP8_DTYPE]:
        name = key.removesuffix(".weight")
        scale = state.pop(f"{name}.scale_weight", None)
        module = model.get_submodule(name)
        if not (isinstance(module, torch.nn.Linear) and name.startswith("blocks.")):
            state[key] = (state[key].float() * (1.0 if scale is None else scale.float())).to(dtype)
            continue
        layer = FP8WeightLinear.from_stored(state[key], scale, state.get(f"{name}.bias"))
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
        state[f"{name}.weight_scale"] = layer.weight_scale
        kept += 1
    for key in [k for k in state if k.endswith(".scale_weight")]:  # scales of non-fp8 weights were applied
        state.pop(key)
    log.info("fp8 weights: %d block linears keep their stored e4m3 values", kept)


def set_attention_backend(model: torch.nn.Module, name: str) -> None:
    """Point every attention layer at the named backend (unknown names raise)."""
    from ..attention import get_attention_backend

    backend = get_attention_backend(name)
    for module in model.modules():
        if hasattr(module, "attend"):
            module.attend = backend.attend


def load_vae(path: str, device, dtype):
    """The Wan VAE; on CUDA it decodes with `VAEDecodeOptions.fast()`.

    Why the fast options by default on the GPU: 1.28× faster streamed decode on an H200 (157.6 vs
    201.2 ms per 12-frame block, docs/performance.md) with bf16-level differences only, no less
    accurate against fp32 (tests/vae/test_decode_options.py). On the CPU the reference path stays.
    """
    from ..vae import WanVAE

    vae = WanVAE.from_file(path, device=device, dtype=dtype if device.type == "cuda" else torch.float32)
    vae.decode_options = loader_vae_decode_options(device)
    vae.stream_slicing = loader_vae_stream_slicing(vae, device)
    return vae


def check_latent_channels(config: WanConfig, vae, vae_path: str | None) -> None:
    """The transformer and the VAE must share a latent space: 16 channels (Wan 2.1) or 48 (Wan 2.2 TI2V-5B)."""
    z = getattr(getattr(vae, "config", None), "z_dim", None)
    if z is not None and z != config.out_dim:  # out_dim: image-started models take more input channels (I2V: 36)
        want = (
            "a Wan 2.2 VAE (wan2.2_vae.safetensors)"
            if config.out_dim == 48
            else "a Wan 2.1 VAE (wan_2.1_vae.safetensors)"
        )
        raise ConfigError(
            f"the transformer makes {config.out_dim} latent channels but the VAE '{Path(vae_path).name}' has {z}; "
            f"use {want}"
        )


def load_preview(path: str, full_vae, device, dtype):
    from ..vae.taehv import load_preview_decoder

    # falls back to the full VAE, with a log line, when the file is absent
    return load_preview_decoder(path, full_vae, device=device, dtype=dtype if device.type == "cuda" else torch.float32)


def load_text_encoder(path: str, text_len: int, device, dtype, placement: str = "device"):
    from ..text.placement import PlacedTextEncoder
    from ..text.umt5 import PromptCache, UMT5TextEncoder

    runs_on = device if placement != "cpu" else torch.device("cpu")
    load_to = device if placement == "device" else torch.device("cpu")  # never all of it on the GPU otherwise
    encoder = UMT5TextEncoder.load(
        path, text_len=text_len, device=load_to, dtype=dtype if runs_on.type == "cuda" else torch.float32
    )
    return PromptCache(PlacedTextEncoder(encoder, placement, device))  # re-encoding an earlier prompt costs nothing
