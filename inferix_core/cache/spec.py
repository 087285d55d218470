"""What a KV cache must hold (KVCacheSpec, from the model and the run) and how (KVCacheConfig, from the user)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError

OFFLOAD_MODES = ("off", "auto", "always")
QUANTIZATIONS = ("none", "int8", "int4")
QUANT_BITS = {"int8": 8, "int4": 4}


@dataclass(frozen=True)
class KVCacheConfig:
    """User-facing cache settings (also the output of the InferixKVCacheConfig node).

    window_frames: latent frames a block attends to, its own included; -1 = every earlier frame.
    sink_frames: the first frames of the stream, kept forever once the window slides (attention sink).
    page_frames: frames per page for the paged store; 0 = one page per block.
    offload: keep cold pages in pinned CPU memory ("auto" when over gpu_budget_bytes).
    quantization: store K/V as int8 or int4 (KIVI-style), keeping a full-precision recent window.
    """

    window_frames: int = -1
    sink_frames: int = 0
    page_frames: int = 0
    offload: str = "off"
    gpu_budget_bytes: int | None = None
    quantization: str = "none"
    residual_frames: int = 3  # full-precision recent frames kept beside quantized pages

    def __post_init__(self) -> None:
        if self.window_frames != -1 and self.window_frames < 1:
            raise ConfigError(f"window_frames must be -1 (global) or >= 1, got {self.window_frames}")
        if self.sink_frames < 0:
            raise ConfigError(f"sink_frames must be >= 0, got {self.sink_frames}")
        if self.window_frames != -1 and self.sink_frames >= self.window_frames:
            raise ConfigError(
                f"sink_frames ({self.sink_frames}) must be smaller than window_frames ({self.window_frames})"
            )
        if self.offload not in OFFLOAD_MODES:
            raise ConfigError(f"offload must be one of {OFFLOAD_MODES}, got '{self.offload}'")
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization must be one of {QUANTIZATIONS}, got '{self.quantization}'")
        if self.page_frames < 0:
            raise ConfigError(f"page_frames must be >= 0, got {self.page_frames}")

    @property
    def is_global(self) -> bool:
        return self.window_frames == -1

    @property
    def ring_frames(self) -> int | None:
        """The window's frames that roll (window − sink, the frames after the sink); None for a global cache."""
        return None if self.is_global else self.window_frames - self.sink_frames

    def check_block(self, block_frames: int) -> None:
        """A block must fit in the window beside the sink frames (the reference silently corrupts otherwise)."""
        if not self.is_global and self.window_frames < self.sink_frames + block_frames:
            raise ConfigError(
                f"window_frames={self.window_frames} cannot hold sink_frames={self.sink_frames} plus a block of "
                f"{block_frames} frames; raise window_frames to at least {self.sink_frames + block_frames}"
            )


@dataclass(frozen=True)
class KVCacheSpec:
    """Shape facts of one run's cache: from the model config and the latent geometry."""

    num_layers: int
    num_heads: int
    head_dim: int
    frame_tokens: int  # tokens per latent frame
    block_frames: int
    batch_size: int = 1
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"
    max_frames: int | None = None  # total frames of the run when known (sizes the global cache)

    @property
    def element_bytes(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def quant_scale_dtype(self) -> torch.dtype:
        """dtype of the quantized pages' scales and zeros: float32 for float32 caches, else float16."""
        return torch.float32 if self.dtype == torch.float32 else torch.float16

    def page_size_bytes(self, quantization: str = "none", page_frames: int = 1) -> int:
        """Bytes of one layer's page of `page_frames` latent frames, as the stores allocate it.

        The one place each storage kind's formula lives (vLLM's `AttentionSpec.page_size_bytes`); the
        planner multiplies it by layers and slots. Per frame, with B batch, T tokens, H heads, D head dim:
          * full precision (ring, paged, offload; the quantized cache's sink/residual frames):
            K and V, 2·B·T·H·D elements of `dtype`;
          * int8 / int4 (quant.py): codes 2·B·T·H·D·bits/8 bytes, plus K scale and zero per
            (frame, head, channel) 2·B·H·D and V scale and zero per (token, head) 2·B·T·H, both in
            `quant_scale_dtype`.
        """
        b, t, h, d = self.batch_size, self.frame_tokens, self.num_heads, self.head_dim
        if quantization == "none":
            frame = 2 * b * t * h * d * self.element_bytes
        elif quantization in QUANT_BITS:
            sb = torch.empty((), dtype=self.quant_scale_dtype).element_size()
            frame = 2 * b * t * h * d * QUANT_BITS[quantization] // 8 + 2 * b * h * d * sb + 2 * b * t * h * sb
        else:
            raise ConfigError(f"quantization must be one of {QUANTIZATIONS}, got '{quantization}'")
        return page_frames * frame

    @property
    def bytes_per_frame(self) -> int:
        """K and V bytes of one latent frame over all layers (full precision)."""
        return self.num_layers * self.page_size_bytes()
