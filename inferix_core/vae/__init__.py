"""Video autoencoders: the Wan 2.1 causal VAE, its streaming sessions, and the TAEHV preview decoder."""

from .config import WAN21_LATENT_MEAN, WAN21_LATENT_STD, VAEDecodeOptions, WanVAEConfig
from .layers import CausalConvCache
from .streaming import DecodeState, SpatialTiling, StreamDecoder, StreamEncoder
from .taehv import TAEHV, TAEHVConfig, TAEHVStreamDecoder, load_preview_decoder
from .wan_vae import WanVAE

__all__ = [
    "TAEHV",
    "WAN21_LATENT_MEAN",
    "WAN21_LATENT_STD",
    "CausalConvCache",
    "DecodeState",
    "SpatialTiling",
    "StreamDecoder",
    "StreamEncoder",
    "TAEHVConfig",
    "TAEHVStreamDecoder",
    "VAEDecodeOptions",
    "WanVAE",
    "WanVAEConfig",
    "load_preview_decoder",
]
