"""Core ComfyUI types at the pack's edges: a core VAE as our streaming Wan VAE, and core LATENT conventions.

* A core `VAE` (`comfy.sd.VAE`) wrapping a Wan 2.1 VAE holds it as `first_stage_model`, whose state dict
  uses the original Wan key names (`decoder.conv1.weight`, ...), the layout our loader reads. We copy
  its weights into our `WanVAE` (causal-conv caches, block-by-block decode); nothing of ComfyUI is
  imported, the object is only duck-typed.
* A core `LATENT` holds *VAE-space* latents: ComfyUI's samplers return `process_latent_out(x)` and its
  Wan VAE decodes them without normalising. Our engine works on normalised latents
  (`(mu - mean) / std`), so the pack converts at its sockets: Block Denoise outputs VAE-space latents
  (core VAE Decode reads them right) and Inferix VAE Decode normalises what it gets (a core sampler's
  output, e.g. SamplerCustomAdvanced with ComfyUI's `SamplerARVideo`, decodes right).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import Any

from inferix_core.errors import ConfigError, InferixError

log = logging.getLogger(__name__)

# core VAE object -> our WanVAE built from it; weak, so a VAE ComfyUI unloads is not kept alive here
_CONVERTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def wan_vae_from_core(core_vae: Any, device: Any = None, dtype: Any = None) -> Any:
    """Our streaming `WanVAE` with the weights of a core ComfyUI VAE (`vae.first_stage_model`, Wan 2.1 or 2.2;
    the version is read from the weights).

    Raises ConfigError naming what was connected when it is not a Wan 2.1 VAE. The conversion is cached
    per core VAE object; `device`/`dtype` (default: CPU, float32) only move the result.
    """
    import torch

    from inferix_core.vae import WanVAE
    from inferix_core.vae.checkpoint import to_canonical

    try:
        model = _CONVERTED.get(core_vae)
    except TypeError:  # not weak-referenceable: convert every time
        model = None
    if model is None:
        inner = getattr(core_vae, "first_stage_model", None)
        if inner is None or not hasattr(inner, "state_dict"):
            raise ConfigError(
                f"the connected VAE ({type(core_vae).__name__}) has no first_stage_model; connect a "
                "core Load VAE node with a Wan VAE (e.g. wan_2.1_vae.safetensors or wan2.2_vae.safetensors)"
            )
        state = {k: v for k, v in inner.state_dict().items() if isinstance(v, torch.Tensor)}
        try:
            canonical, layout = to_canonical(state, source=f"core VAE ({type(inner).__name__})")
            model = WanVAE.from_state_dict(canonical, source="core VAE")
        except InferixError as exc:
            raise ConfigError(
                f"the connected core VAE is not a Wan 2.1 / 2.2 VAE Inferix can stream-decode "
                f"(image VAEs are not supported): {exc}"
            ) from exc
        model = model.requires_grad_(False).eval()
        log.info(
            "using the core VAE's weights (%s layout, dim %d, z_dim %d)", layout, model.config.dim, model.config.z_dim
        )
        with contextlib.suppress(TypeError):  # not weak-referenceable: no cache
            _CONVERTED[core_vae] = model
    return model.to(device=device or "cpu", dtype=dtype or torch.float32)


def to_core_latent(vae: Any, normalised: Any) -> Any:
    """Normalised latents [B, C, F, h, w] (the engine's) → VAE space (core LATENT), in float32.

    Without a VAE that defines the normalisation the latents are returned as they are.
    """
    if vae is None or not hasattr(vae, "denormalise"):
        log.debug("no VAE normalisation to undo; LATENT carries the engine's latents as they are")
        return normalised
    return vae.denormalise(normalised)


def from_core_latent(vae: Any, samples: Any) -> Any:
    """VAE-space latents [B, C, F, h, w] (a core LATENT) → the normalised latents our decoders take."""
    if vae is None or not hasattr(vae, "normalise"):
        return samples
    return vae.normalise(samples)


def clip_vision_from_core(core_clip_vision: Any) -> Any:
    """A core CLIP_VISION (ComfyUI's Load CLIP Vision) → `inferix_core.vision.CLIPVisionEncoder`.

    Its weights (transformers names, `get_sd()`) run through transformers' CLIPVisionModel with the
    authors' preprocessing (`inferix_core.vision.clip_vision`), so the tokens are Matrix-Game's own.
    An encoder passes through unchanged.
    """
    from inferix_core.errors import ConfigError
    from inferix_core.vision import CLIPVisionEncoder

    if isinstance(core_clip_vision, CLIPVisionEncoder):
        return core_clip_vision
    get_sd = getattr(core_clip_vision, "get_sd", None)
    if not callable(get_sd):
        raise ConfigError(
            "clip_vision must come from Load CLIP Vision (a CLIP_VISION); got " + type(core_clip_vision).__name__
        )
    return CLIPVisionEncoder.from_state_dict(get_sd(), source="core CLIP_VISION")
