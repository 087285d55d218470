"""Video autoencoders: the Wan 2.1 and Wan 2.2 causal VAEs, their streaming sessions, and the TAEHV preview decoder."""

from .config import (
    WAN21_LATENT_MEAN,
    WAN21_LATENT_STD,
    WAN22_LATENT_MEAN,
    WAN22_LATENT_STD,
    VAEDecodeOptions,
    Wan22VAEConfig,
    WanVAEConfig,
)
from .layers import CausalConvCache
from .pixel_window import PixelWindowEncoder
from .streaming import DecodeState, SpatialTiling, StreamDecoder, StreamEncoder
from .taehv import TAEHV, TAEHVConfig, TAEHVStreamDecoder, load_preview_decoder
from .wan22_vae import Wan22VAE
from .wan_vae import WanVAE

__all__ = [
    "TAEHV",
    "WAN21_LATENT_MEAN",
    "WAN21_LATENT_STD",
    "WAN22_LATENT_MEAN",
    "WAN22_LATENT_STD",
    "CausalConvCache",
    "DecodeState",
    "PixelWindowEncoder",
    "SpatialTiling",
    "StreamDecoder",
    "StreamEncoder",
    "TAEHVConfig",
    "TAEHVStreamDecoder",
    "VAEDecodeOptions",
    "Wan22VAE",
    "Wan22VAEConfig",
    "WanVAE",
    "WanVAEConfig",
    "load_preview_decoder",
]
