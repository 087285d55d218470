"""Building blocks of the Wan causal 3D VAE, with the temporal cache as an explicit argument.

Every module that looks at past frames takes a `CausalConvCache` and records there what the next call
needs (the last input frames of each temporal conv). Running a sequence in one call or in any number
of chunks threaded through the same cache gives the same result. Whole-model assembly lives in
wan_vae.py; nothing here knows about latent normalisation or files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class CausalConvCache:
    """What each temporal layer remembers between calls, keyed by module path.

    Unlike the reference's `feat_cache` list walked with a mutable index, entries are named, so a
    state can be inspected, copied (`fork`) and handed back; layers replace entries, never mutate
    the stored tensors, so a forked state stays valid.

    Attributes:
        frames: the last input frames of each temporal conv ([B, C, k−1, H, W]); a missing entry
            means zero history, which equals the reference's zero front padding.
        started: resample layers that have seen their first frame (the decoder's upsample3d passes
            frame 0 through without its time conv; the encoder's downsample3d does the same).
        first_frame_bypass: True gives the reference semantics (decode equals the full decode). False
            reproduces the realtime demo's zero-initialised caches, where frame 0 is doubled too.
    """

    frames: dict[str, Tensor] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    first_frame_bypass: bool = True

    def fork(self) -> CausalConvCache:
        """A shallow copy that can be advanced without changing this one."""
        return CausalConvCache(dict(self.frames), set(self.started), self.first_frame_bypass)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.frames.values())


class CausalConv3d(nn.Conv3d):
    """Conv3d padded causally in time (all k−1 padding frames in front, from the cache) and symmetrically in space."""

    cache_key: str = ""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int, int],
                 stride: int | tuple[int, int, int] = 1, padding: int | tuple[int, int, int] = 0) -> None:
        kt, kh, kw = (kernel_size,) * 3 if isinstance(kernel_size, int) else kernel_size
        pt, ph, pw = (padding,) * 3 if isinstance(padding, int) else padding
        super().__init__(in_channels, out_channels, (kt, kh, kw), stride, padding=(0, ph, pw))
        self.history_frames = 2 * pt  # Wan pads time by 2·p in front and 0 behind

    def forward(self, x: Tensor, cache: CausalConvCache | None = None) -> Tensor:  # x: (B, C, T, H, W)
        if self.history_frames == 0:
            return super().forward(x)
        past = cache.frames.get(self.cache_key) if cache is not None else None
        if past is None:
            past = x.new_zeros(x.shape[0], x.shape[1], self.history_frames, *x.shape[3:])
        x = torch.cat([past, x], dim=2)  # (B, C, k−1+T, H, W)
        if cache is not None:
            cache.frames[self.cache_key] = x[:, :, -self.history_frames:].clone()
        return super().forward(x)


class RMSNorm(nn.Module):
    """x / ‖x‖₂ over channels · √C · gamma (Wan's RMS_norm, no bias)."""

    def __init__(self, dim: int, spatial_dims: int) -> None:
        super().__init__()
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim, *([1] * spatial_dims)))

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=1) * self.scale * self.gamma


class ResidualBlock(nn.Module):
    """out = conv(SiLU(RMS(conv(SiLU(RMS(x)))))) + shortcut(x); indices match the reference's Sequential."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.residual = nn.ModuleDict({
            "0": RMSNorm(in_dim, 3), "2": CausalConv3d(in_dim, out_dim, 3, padding=1),
            "3": RMSNorm(out_dim, 3), "6": CausalConv3d(out_dim, out_dim, 3, padding=1),
        })
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        r = self.residual
        h = r["2"](F.silu(r["0"](x)), cache)
        h = r["6"](F.silu(r["3"](h)), cache)
        return h + (self.shortcut(x) if self.shortcut is not None else x)


class AttentionBlock(nn.Module):
    """Single-head self-attention over the h·w positions of each frame independently (no temporal state)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RMSNorm(dim, 2)
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: Tensor, cache: CausalConvCache | None = None) -> Tensor:
        B, C, T, H, W = x.shape
        y = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)  # (B·T, C, H, W)
        qkv = self.to_qkv(self.norm(y)).reshape(B * T, 3 * C, H * W).transpose(1, 2)  # (B·T, HW, 3C)
        q, k, v = qkv.unsqueeze(1).chunk(3, dim=-1)  # each (B·T, 1, HW, C)
        y = F.scaled_dot_product_attention(q, k, v)  # (B·T, 1, HW, C)
        y = self.proj(y.squeeze(1).transpose(1, 2).reshape(B * T, C, H, W))
        return x + y.reshape(B, T, C, H, W).permute(0, 2, 1, 3, 4)


def _per_frame(fn, x: Tensor) -> Tensor:
    """Apply a 2D module to every frame of (B, C, T, H, W)."""
    B, C, T, H, W = x.shape
    y = fn(x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W))
    return y.reshape(B, T, *y.shape[1:]).permute(0, 2, 1, 3, 4)


class Upsample(nn.Module):
    """Decoder 2× spatial upsample (nearest + 3×3 conv to C/2), optionally doubling frames first.

    With `temporal`, `time_conv` (kernel 3 in time) maps C → 2C channels and each output frame i
    becomes frames 2i (channels [0, C)) and 2i+1 (channels [C, 2C)). The first frame of the stream
    (from latent frame 0) skips the time conv and is not doubled, which gives the 1 + 4·(F − 1) rule;
    the time conv's history therefore starts at frame 1, with zeros before it.
    """

    def __init__(self, dim: int, temporal: bool) -> None:
        super().__init__()
        self.resample = nn.ModuleDict({"1": nn.Conv2d(dim, dim // 2, 3, padding=1)})
        self.time_conv = CausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0)) if temporal else None
        self.cache_key = ""

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        if self.time_conv is not None:
            x = self._double_frames(x, cache)
        conv = self.resample["1"]
        return _per_frame(lambda y: conv(F.interpolate(y, scale_factor=2.0, mode="nearest")), x)

    def _double_frames(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        head = x[:, :, :0]
        if self.cache_key not in cache.started:
            cache.started.add(self.cache_key)
            if cache.first_frame_bypass:
                head, x = x[:, :, :1], x[:, :, 1:]
        if x.shape[2] == 0:
            return head
        B, C, T, H, W = x.shape
        y = self.time_conv(x, cache).reshape(B, 2, C, T, H, W)  # (B, 2, C, T, H, W)
        y = y.permute(0, 2, 3, 1, 4, 5).reshape(B, C, 2 * T, H, W)  # frame 2i from half 0, 2i+1 from half 1
        return torch.cat([head, y], dim=2)


class Downsample(nn.Module):
    """Encoder 2× spatial downsample (pad right/bottom by 1, 3×3 stride-2 conv), optionally halving frames after.

    With `temporal`, frame 0 passes through and `time_conv` (kernel 3, stride 2, no padding) runs on the
    windows (X0, X1, X2), (X2, X3, X4), … so X0 is reused as history. The cache holds the frames from
    the start of the next window on, so any chunking gives the same windows.
    """

    def __init__(self, dim: int, temporal: bool) -> None:
        super().__init__()
        self.resample = nn.ModuleDict({"1": nn.Conv2d(dim, dim, 3, stride=2)})
        self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1)) if temporal else None
        self.cache_key = ""

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        conv = self.resample["1"]
        x = _per_frame(lambda y: conv(F.pad(y, (0, 1, 0, 1))), x)
        if self.time_conv is None:
            return x
        head = x[:, :, :0]
        if self.cache_key not in cache.started:
            cache.started.add(self.cache_key)
            head, pending = x[:, :, :1], x[:, :, :1]
            x = x[:, :, 1:]
        else:
            pending = cache.frames[self.cache_key]
        seq = torch.cat([pending, x], dim=2)
        num_windows = (seq.shape[2] - 1) // 2
        cache.frames[self.cache_key] = seq[:, :, 2 * num_windows:].clone()
        if num_windows == 0:
            return head
        y = self.time_conv(seq[:, :, : 2 * num_windows + 1])  # (B, C, num_windows, H, W)
        return torch.cat([head, y], dim=2)


def assign_cache_keys(model: nn.Module) -> None:
    """Name every stateful layer by its module path, so cache entries are stable and readable."""
    for name, module in model.named_modules():
        if isinstance(module, CausalConv3d | Upsample | Downsample):
            module.cache_key = name
