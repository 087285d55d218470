"""Building blocks of the Wan transformer: norms, sinusoidal timestep features and 3-axis RoPE.

Precision: the sinusoidal features and the RoPE angles are computed in float64 as in the reference;
the RoPE rotation itself is applied in float32 (the reference rotates in complex128). Rotating in
float32 keeps the fp32 fixtures within ~1e-6 of the reference while moving a quarter of the bytes, and
it is a plain real-valued formula that `torch.compile` fuses with the qk-norm (complex tensors are
not fused). RMSNorm and LayerNorm normalise in float32 (a bf16 input is upcast inside the norm kernel,
not by a cast pass). RoPE angles are computed from the absolute position on
the fly, so positions never wrap or run out of a table (the reference's table stops at 1024 positions
per axis; for positions < 1024 the values are identical).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...tensors import to_device_async  # used below; also imported from here by older code


class RMSNorm(nn.Module):
    """x · rsqrt(mean(x²) + eps) · weight, normalised in float32 (as Wan's WanRMSNorm).

    Wan rounds the normalised x to x's dtype before the weight multiply (`_norm(x.float()).type_as(x) *
    weight`); so does this: `F.rms_norm` without a weight is that first part (it upcasts a bf16 x to
    float32 and rounds its result once; on CUDA one fused kernel instead of cast, pow, mean, add, rsqrt,
    mul, cast), then the weight multiply. With `out_dtype` wider than that product (RoPE wants float32),
    the same multiply stores its rounded result as out_dtype: on CUDA one kernel instead of mul + cast
    (with autograd, under `torch.compile`, which take no `out=`, and on the CPU, which makes a temporary for
    it: the multiply and then the cast).
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        normed = F.rms_norm(x, (x.shape[-1],), eps=self.eps)  # float32 inside, returned in x's dtype
        dtype = torch.promote_types(normed.dtype, self.weight.dtype)
        if out_dtype is None or out_dtype == dtype:
            return normed * self.weight
        grad = torch.is_grad_enabled() and (normed.requires_grad or self.weight.requires_grad)
        cast = grad or torch.compiler.is_compiling() or normed.device.type == "cpu"
        if cast or torch.promote_types(dtype, out_dtype) != out_dtype:
            # autograd and Inductor take no out=, the CPU makes a temporary for it anyway; narrower: a cast
            return (normed * self.weight).to(out_dtype)
        return torch.mul(normed, self.weight, out=torch.empty(normed.shape, dtype=out_dtype, device=normed.device))


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 (affine parameters too) and returned in the input dtype.

    For a bf16/fp16 x with parameters of its dtype, `F.layer_norm` on x itself is that computation: the
    kernel (CUDA and CPU) accumulates and normalises in float32 and rounds its output once, which is
    what casting x up, normalising and casting back does in three passes (two of them copies).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if x.dtype in (torch.bfloat16, torch.float16) and all(p is None or p.dtype == x.dtype for p in (weight, bias)):
            return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)
        weight = None if weight is None else weight.float()
        bias = None if bias is None else bias.float()
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

    def freqs(self, frame_positions: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
        """Rotations for tokens in (f, h, w) order, as float32 (cos, sin) pairs.

        Args:
            frame_positions: (F,) absolute temporal positions of the frames.
        Returns:
            (F·H·W, 1, c, 2) float32, [..., 0] = cos and [..., 1] = sin of each pair's angle;
            broadcastable over heads. Angles are computed in float64 before the cast.
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
            angles = torch.outer(pos, inv).view(*sizes, -1)  # (n_axis, pairs) placed on its axis
            parts.append(angles.expand(num_frames, height, width, -1))
        angles = torch.cat(parts, dim=-1).reshape(num_frames * height * width, 1, -1)
        table = torch.stack((torch.cos(angles), torch.sin(angles)), dim=-1).float()
        freqs = to_device_async(table, device)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[key] = freqs
        return freqs


def rotate_pairs_flip(xr: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """(…, c, 2) pairs rotated by (…, c, 2) (cos, sin): (x1, x2)·cos + (x2, x1)·(−sin, sin), the swap a flip."""
    sin = freqs[..., 1:2]
    return xr * freqs[..., 0:1] + xr.flip(-1) * torch.cat((-sin, sin), dim=-1)


def rotate_pairs_stack(xr: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """The same rotation with the two rotated halves stacked: (x1·cos − x2·sin, x1·sin + x2·cos)."""
    x1, x2, cos, sin = xr[..., 0], xr[..., 1], freqs[..., 0], freqs[..., 1]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


# The real-arithmetic RoPE formula of compiled blocks: the same products, each one fused norm + RoPE kernel for
# Inductor. On the H200 the flip kernel takes 43 µs per 1.3B block call against the stack's 62
# (bench/profile_engine.py --rope-formula, docs/performance.md "Wave 2, fifth pass")
COMPILED_ROPE_FORMULAS = {"flip": rotate_pairs_flip, "stack": rotate_pairs_stack}
COMPILED_ROPE_FORMULA = "flip"


def apply_rope(x: torch.Tensor, freqs: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Rotate (B, L, H, D) by (L, 1, D/2, 2) (cos, sin) pairs in float32; returned in `dtype` (x's by default).

    Eager: one complex64 multiply, plus a cast of x up when it is not float32 already (RMSNorm can hand
    over float32 with no cast pass: `RMSNorm(x, out_dtype=torch.float32)`) and one cast down to `dtype`
    when that is not float32. Under `torch.compile`: the same products written out in real arithmetic
    (`COMPILED_ROPE_FORMULA`), which Inductor fuses with the surrounding norm (it does not fuse complex ops).
    """
    b, seq, heads, dim = x.shape
    dtype = x.dtype if dtype is None else dtype
    xr = x.float().view(b, seq, heads, dim // 2, 2)
    if not torch.compiler.is_compiling():
        out = torch.view_as_real(torch.view_as_complex(xr) * torch.view_as_complex(freqs))
        return out.flatten(3).to(dtype)
    return COMPILED_ROPE_FORMULAS[COMPILED_ROPE_FORMULA](xr, freqs).flatten(3).to(dtype)
