"""Building blocks of the Wan transformer: norms, sinusoidal timestep features and 3-axis RoPE.

Precision follows the reference exactly: the sinusoidal features and the RoPE rotation are computed in
float64 (complex128) and cast back, RMSNorm normalises in float32. RoPE angles are computed from the
absolute position on the fly, so positions never wrap or run out of a table (the reference's table
stops at 1024 positions per axis; for positions < 1024 the values are identical).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """x · rsqrt(mean(x²) + eps) · weight, normalised in float32 (as Wan's WanRMSNorm)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 (affine parameters too) and returned in the input dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).type_as(x)


def sinusoidal_embedding(dim: int, position: torch.Tensor) -> torch.Tensor:
    """[cos(p·ω), sin(p·ω)] with ω_j = 10000^(−j/half), computed in float64.

    Args:
        dim: number of features (freq_dim), even.
        position: (N,) timesteps, any float dtype.
    Returns:
        (N, dim) float64.
    """
    half = dim // 2
    pos = position.to(torch.float64)
    omega = torch.pow(10000, -torch.arange(half, dtype=torch.float64, device=pos.device).div(half))
    angles = torch.outer(pos, omega)  # (N, half)
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)


class RotaryEmbedding3D:
    """3-axis RoPE of Wan: head pairs split into temporal / height / width groups.

    For head_dim d there are c = d/2 complex pairs: c − 2⌊c/3⌋ temporal, then ⌊c/3⌋ height and ⌊c/3⌋
    width pairs. Axis a with D_a = 2·pairs_a dims rotates pair k by pos·10000^(−2k/D_a).
    """

    def __init__(self, head_dim: int, theta: float = 10000.0):
        c = head_dim // 2
        self.split = (c - 2 * (c // 3), c // 3, c // 3)
        self.inv_freq = [
            1.0 / torch.pow(theta, torch.arange(0, 2 * n, 2, dtype=torch.float64, device="cpu").div(2 * n))
            for n in self.split
        ]
        self._cache: dict[tuple, torch.Tensor] = {}  # tables are built on the CPU in float64 (even under
        # a `with torch.device(...)` context) and moved to the compute device once per chunk position

    def freqs(
        self, frame_positions: torch.Tensor, height: int, width: int, device: torch.device
    ) -> torch.Tensor:
        """Complex128 rotations for tokens in (f, h, w) order.

        Args:
            frame_positions: (F,) absolute temporal positions of the frames.
        Returns:
            (F·H·W, 1, c) complex128, broadcastable over heads.
        """
        key = (tuple(frame_positions.tolist()), height, width, str(device))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        num_frames = frame_positions.numel()
        parts = []
        for pos, inv, sizes in (
            (frame_positions.to(torch.float64).cpu(), self.inv_freq[0], (num_frames, 1, 1)),
            (torch.arange(height, dtype=torch.float64, device="cpu"), self.inv_freq[1], (1, height, 1)),
            (torch.arange(width, dtype=torch.float64, device="cpu"), self.inv_freq[2], (1, 1, width)),
        ):
            angles = torch.outer(pos, inv)  # (n_axis, pairs)
            rot = torch.polar(torch.ones_like(angles), angles).view(*sizes, -1)
            parts.append(rot.expand(num_frames, height, width, -1))
        freqs = to_device_async(torch.cat(parts, dim=-1).reshape(num_frames * height * width, 1, -1), device)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[key] = freqs
        return freqs


def to_device_async(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Copy a host tensor to `device` without blocking the host (pinned staging on CUDA).

    A plain `.to("cuda")` from pageable memory waits for the copy, i.e. a host sync inside the block
    loop; from pinned memory the copy is queued on the stream and the caching host allocator keeps the
    staging buffer alive until it has run.
    """
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate (B, L, H, D) by complex128 freqs (L, 1, D/2); computed in float64, returned in x's dtype."""
    b, seq, heads, dim = x.shape
    xc = torch.view_as_complex(x.to(torch.float64).reshape(b, seq, heads, dim // 2, 2))
    out = torch.view_as_real(xc * freqs.unsqueeze(0)).flatten(3)  # (B, L, H, D)
    return out.to(x.dtype)
