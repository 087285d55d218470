"""WorldModel: the immutable handle on a loaded world model (transformer, decoders, text conditioning, defaults).

`models.loader.load_world_model` builds one; `describe()` says what was loaded and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..cache import KVCacheConfig
from ..scheduler import SamplingConfig
from .families import RECACHE_STYLE_BY_FAMILY, get_family
from .fp8 import count_fp8_linears
from .matrix_game2 import MATRIX_GAME2_VARIANTS
from .wan.causal_transformer import CausalWanTransformer
from .wan.config import WanConfig


@dataclass(frozen=True)
class WorldModel:
    """An immutable handle on everything one stream needs: transformer, decoders, text conditioning."""

    family: str
    config: WanConfig
    sampling: SamplingConfig
    default_cache: KVCacheConfig
    transformer: CausalWanTransformer = field(repr=False)
    vae: object | None = field(default=None, repr=False)
    preview_decoder: object | None = field(default=None, repr=False)
    text_encoder: object | None = field(default=None, repr=False)
    default_context: torch.Tensor | None = field(default=None, repr=False)  # models without a text encoder
    action_names: tuple[str, ...] = ()
    fps: int = 16
    source: str = ""
    default_size: tuple[int, int] | None = None  # (width, height) the model was trained at, if it has one
    family_reason: str = ""  # why this family (the argument, or the evidence found in the file)
    variant: str = ""  # Matrix-Game 2.0: universal, gta_drive or templerun
    # how a prompt switch re-caches (pipeline/recache.py); None: the family's (RECACHE_STYLE_BY_FAMILY). A LongLive
    # config beside the weights with `global_sink: false` sets "window_reset" (models/family_detect.recache_style_beside)
    recache_style: str | None = None

    @property
    def switch_recache(self) -> str | None:
        """How a prompt switch re-caches this model's K/V: the config beside its weights' (`recache_style`), else its
        family's (RECACHE_STYLE_BY_FAMILY); None: the family has none (a finite run then switches hard)."""
        return self.recache_style or RECACHE_STYLE_BY_FAMILY.get(self.family)

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.transformer.parameters()).dtype

    @property
    def spatial_compression(self) -> int:
        return getattr(getattr(self.vae, "config", None), "spatial_compression", 8)

    @property
    def temporal_compression(self) -> int:
        return getattr(getattr(self.vae, "config", None), "temporal_compression", 4)

    @property
    def size_step(self) -> int:
        """Pixel sizes must be multiples of this: the VAE's spatial stride × the patch's height (16 for Wan 2.1, 32
        for Wan 2.2 / LongLive 2.0: 16 × 2)."""
        return self.spatial_compression * self.config.patch_size[1]

    def _text_encoder_label(self) -> str:
        vocabulary = getattr(self.text_encoder, "config", None)
        if hasattr(vocabulary, "hint"):  # the bundled v2 model's fixed vocabulary: name its scenes' words
            return f"vocabulary ({vocabulary.hint()})"
        if self.text_encoder is not None:
            return "yes"
        return "none (fixed context)" if self.default_context is not None else "none"

    def describe(self) -> str:
        c = self.config
        lines = [
            f"family: {self.family} ({MATRIX_GAME2_VARIANTS[self.variant].description if self.variant in MATRIX_GAME2_VARIANTS else get_family(self.family).description})",
            *([f"family chosen because: {self.family_reason}"] if self.family_reason else []),
            f"source: {self.source}",
            f"transformer: {c.num_layers} layers, dim {c.dim}, {c.num_heads} heads × {c.head_dim}, ffn {c.ffn_dim}, "
            f"{c.num_parameters() / 1e6:.1f}M params, {self.dtype} on {self.device}",
            f"sampling: steps {list(self.sampling.denoising_steps)} (warped={self.sampling.warp_denoising_steps}), "
            f"shift {self.sampling.shift}, {self.sampling.block_frames} latent frames per block"
            + (
                f", first block steps {list(self.sampling.first_block_denoising_steps)}"
                if self.sampling.first_block_denoising_steps
                else ""
            )
            + (
                f", KV recompute from {self.sampling.kv_recompute_frames} clean frames per block ("
                + ("first latent frame kept" if self.sampling.keep_first_frame else "first frame re-encoded by the VAE")
                + ")"
                if self.sampling.kv_recompute_frames
                else ""
            ),
            f"cache default: window {self.default_cache.window_frames}, sink {self.default_cache.sink_frames}",
            f"vae: {'yes' if self.vae is not None else 'none'}; text encoder: {self._text_encoder_label()}",
        ]
        fp8 = count_fp8_linears(self.transformer, weight_only=False)
        stored = count_fp8_linears(self.transformer, weight_only=True)
        if stored:
            lines.append(
                f"fp8 weights: {stored} block linear layers stored in e4m3, dequantized per call to {self.dtype}"
            )
        if fp8:
            lines.append(
                f"fp8: {fp8} block linear layers in e4m3 (the embeddings, time projection and head in {self.dtype})"
            )
        swap = getattr(self.transformer, "block_swap", None)
        if swap is not None and swap.swapped:
            lines.append(
                f"block swap: {swap.resident} of {swap.plan.num_blocks} blocks resident, {len(swap.swapped)} streamed "
                f"from host memory ({swap.plan.device_bytes / 2**30:.2f} GiB of block weights on the device, "
                f"{swap.plan.host_bytes / 2**30:.2f} GiB on the host)"
            )
        if self.action_names:
            lines.append(f"actions: {', '.join(self.action_names)}")
        return "\n".join(lines)


__all__ = ["WorldModel"]
