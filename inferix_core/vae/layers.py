"""Building blocks of the Wan causal 3D VAE, with the temporal cache as an explicit argument.

Every module that looks at past frames takes a `CausalConvCache` and records there what the next call
needs (the last input frames of each temporal conv). Running a sequence in one call or in any number
of chunks threaded through the same cache gives the same result. Whole-model assembly lives in
wan_vae.py; nothing here knows about latent normalisation or files.

Decoder layers also take an optional `VAEDecodeOptions`: None (or all off) runs the reference code path;
the options reach the same result by other routes (fused buffers, channels-last layout, a sub-pixel
upsample), checked against it in tests/vae/test_decode_options.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..compile_boundary import mark_compile_boundaries
from .options import VAEDecodeOptions


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
        krea_upsample_history: reproduce Krea Realtime's decoder (krea-ai/realtime-video
            demo_utils/vae_block3.py `Resample.forward`, upsample3d): after a one-frame input the time conv's
            history becomes [where(previous == 0, 0, current), current] instead of [previous, current], so
            from the 4th latent frame on (decoded one latent frame per call) the frames differ from the full
            decode. Off by default (the Wan reference); `StreamDecoder(krea_decoder=True)` turns it on.
        owned: entries this cache alone holds, which a row-band decode may update in place
            (vae/row_bands.py); `fork` empties it on both sides, as the two then share every tensor.
    """

    frames: dict[str, Tensor] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    first_frame_bypass: bool = True
    krea_upsample_history: bool = False
    owned: set[str] = field(default_factory=set)

    def fork(self) -> CausalConvCache:
        """A shallow copy that can be advanced without changing this one (neither updates a shared entry in place)."""
        self.owned = set()
        return CausalConvCache(
            dict(self.frames), set(self.started), self.first_frame_bypass, self.krea_upsample_history
        )

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.frames.values())


class CausalConv3d(nn.Conv3d):
    """Conv3d padded causally in time (all k−1 padding frames in front, from the cache) and symmetrically in space."""

    cache_key: str = ""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int, int],
        stride: int | tuple[int, int, int] = 1,
        padding: int | tuple[int, int, int] = 0,
    ) -> None:
        kt, kh, kw = (kernel_size,) * 3 if isinstance(kernel_size, int) else kernel_size
        pt, ph, pw = (padding,) * 3 if isinstance(padding, int) else padding
        super().__init__(in_channels, out_channels, (kt, kh, kw), stride, padding=(0, ph, pw))
        self.history_frames = 2 * pt  # Wan pads time by 2·p in front and 0 behind

    def forward(self, x: Tensor, cache: CausalConvCache | None = None) -> Tensor:  # x: (B, C, T, H, W)
        if self.history_frames == 0:
            return super().forward(x)
        past = cache.frames.get(self.cache_key) if cache is not None else None
        if past is None:  # zero history, in x's layout so the cat below keeps it
            past = _zeros((x.shape[0], x.shape[1], self.history_frames, *x.shape[3:]), x, _layout(x))
        x = torch.cat([past, x], dim=2)  # (B, C, k−1+T, H, W)
        return self.forward_padded(x, cache)

    def forward_padded(self, x: Tensor, cache: CausalConvCache | None, bias: bool = True) -> Tensor:
        """Conv over x (B, C, k−1+T, H, W) that already holds the history frames in front; caches its tail.

        `bias=False` leaves the bias out, for a caller that adds it inside its next fused kernel (cuDNN
        adds a conv bias as a separate broadcast pass, which on NDHWC activations is a slow strided kernel).
        """
        if cache is not None and self.history_frames:
            cache.frames[self.cache_key] = x[:, :, -self.history_frames :].clone()
        return super().forward(x) if bias else self._conv_forward(x, self.weight, None)


def _layout(x: Tensor) -> torch.memory_format:
    """channels_last_3d when a 5-D tensor is laid out NDHWC (and not contiguous too), else contiguous."""
    if x.ndim == 5 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def _zeros(shape: tuple[int, ...], like: Tensor, fmt: torch.memory_format) -> Tensor:
    """Zeros of like's dtype and device in layout `fmt` (`torch.zeros` takes no memory format)."""
    return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=fmt).zero_()


def memory_format_for(opts: VAEDecodeOptions, ndim: int = 5) -> torch.memory_format:
    """The layout the options ask for, for 5-D activations/weights or 4-D per-frame ones."""
    if not opts.channels_last:
        return torch.contiguous_format
    return torch.channels_last_3d if ndim == 5 else torch.channels_last


def _norm_silu_cat(x: Tensor, gamma: Tensor, past: Tensor, bias: Tensor | None, channels_last: bool) -> Tensor:
    """cat([past, silu(rms(x + bias))]) along time: the body that `torch.compile` fuses into one kernel per shape.

    `bias` is the producing conv's, left out of that conv (`CausalConv3d.forward_padded(bias=False)`).
    The output is NDHWC when `channels_last`: left to itself, inductor wrote some of these buffers NCDHW
    (seen on the H200 for a cached history), and cuDNN then copied each one back to NDHWC before its conv.
    """
    if bias is not None:
        x = x + bias.view(1, -1, 1, 1, 1)
    scale = x.shape[1] ** 0.5
    inv = scale / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(1e-12)
    out = torch.cat([past, F.silu(x * inv * gamma)], dim=2)
    return out.contiguous(memory_format=torch.channels_last_3d) if channels_last else out


def _add_bias_residual_(h: Tensor, bias: Tensor, residual: Tensor) -> Tensor:
    """h += bias + residual in one pass (compiled): a residual block's last conv bias and its shortcut."""
    return h.add_(residual + bias.view(1, -1, 1, 1, 1))


_COMPILED: dict[str, Callable[..., Tensor]] = {}
# Static shapes give the best kernels; a stream at one resolution has ~9 distinct (C, T, H, W) (first and
# later blocks differ in T), more than dynamo's default recompile limit of 8, so the limit is raised
# around these calls only. Tests switch `dynamic` to keep CPU compile time short.
COMPILE_KWARGS: dict[str, object] = {"dynamic": False, "fullgraph": True}
_RECOMPILE_LIMIT = 64


def _compiled(name: str, fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    if name not in _COMPILED:
        mark_compile_boundaries()
        _COMPILED[name] = torch.compile(fn, **COMPILE_KWARGS)
    return _COMPILED[name]


def _run_compiled(name: str, fn: Callable[..., Tensor], *args) -> Tensor:
    import torch._dynamo as dynamo  # imported on first use: it is slow to import

    limit = "recompile_limit" if hasattr(dynamo.config, "recompile_limit") else "cache_size_limit"
    with dynamo.config.patch(**{limit: _RECOMPILE_LIMIT}):
        return _compiled(name, fn)(*args)


def norm_silu_padded(
    x: Tensor,
    norm: RMSNorm,
    conv: CausalConv3d,
    cache: CausalConvCache | None,
    opts: VAEDecodeOptions,
    bias: Tensor | None = None,
) -> Tensor:
    """conv's input buffer (B, C, k−1+T, H, W): its cached history frames, then silu(norm(x + bias)).

    The reference computes norm → SiLU → `torch.cat([history, ·])`, a full-size copy per pass; here
    the normalised activations are written into the buffer's tail directly (eager), or the whole thing
    is one compiled kernel. Equal to the reference up to rounding (x · (√C/‖x‖) · γ instead of
    x / ‖x‖ · √C · γ). `bias` (compiled route only) is the bias the conv that made x left out.
    """
    hist = conv.history_frames
    past = cache.frames.get(conv.cache_key) if cache is not None else None
    B, C, T, H, W = x.shape
    fmt = memory_format_for(opts)
    if opts.compile:
        if past is None:
            past = _zeros((B, C, hist, H, W), x, fmt)
        return _run_compiled("norm_silu_cat", _norm_silu_cat, x, norm.gamma, past, bias, opts.channels_last)
    if bias is not None:
        raise ValueError("norm_silu_padded adds a folded conv bias on the compiled route only")
    buf = torch.empty((B, C, hist + T, H, W), dtype=x.dtype, device=x.device, memory_format=fmt)
    head, body = buf[:, :, :hist], buf[:, :, hist:]
    if past is None:
        head.zero_()
    else:
        head.copy_(past)
    # Norm statistics: the sum of squares accumulates in fp32 for bf16 input; the factor is formed in fp32.
    norm2 = torch.linalg.vector_norm(x, dim=1, keepdim=True)  # (B, 1, T, H, W)
    inv = (norm.scale / norm2.float().clamp_min(1e-12)).to(x.dtype)
    torch.mul(x, inv, out=body)
    body.mul_(norm.gamma)
    F.silu(body, inplace=True)
    return buf


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
        self.residual = nn.ModuleDict(
            {
                "0": RMSNorm(in_dim, 3),
                "2": CausalConv3d(in_dim, out_dim, 3, padding=1),
                "3": RMSNorm(out_dim, 3),
                "6": CausalConv3d(out_dim, out_dim, 3, padding=1),
            }
        )
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        r = self.residual
        if opts is not None and opts.compile and r["2"].bias is not None and r["6"].bias is not None:
            # each conv's bias is added inside the next compiled pass instead of by cuDNN (see forward_padded)
            h = r["2"].forward_padded(norm_silu_padded(x, r["0"], r["2"], cache, opts), cache, bias=False)
            h = norm_silu_padded(h, r["3"], r["6"], cache, opts, bias=r["2"].bias)
            h = r["6"].forward_padded(h, cache, bias=False)
            residual = self.shortcut(x) if self.shortcut is not None else x
            return _run_compiled("add_bias_residual_", _add_bias_residual_, h, r["6"].bias, residual)
        if opts is not None and opts.fused:
            h = r["2"].forward_padded(norm_silu_padded(x, r["0"], r["2"], cache, opts), cache)
            h = r["6"].forward_padded(norm_silu_padded(h, r["3"], r["6"], cache, opts), cache)
            return h.add_(self.shortcut(x) if self.shortcut is not None else x)  # h is ours: add in place
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

    def forward(self, x: Tensor, cache: CausalConvCache | None = None, opts: VAEDecodeOptions | None = None) -> Tensor:
        B, C, T, H, W = x.shape
        y = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)  # (B·T, C, H, W)
        qkv = self.to_qkv(self.norm(y)).reshape(B * T, 3 * C, H * W).transpose(1, 2)  # (B·T, HW, 3C)
        q, k, v = qkv.unsqueeze(1).chunk(3, dim=-1)  # each (B·T, 1, HW, C)
        if opts is not None and opts.fused:
            # as chunks of qkv, SDPA took its math path here (fp32 upcast, ~4x slower on the H200)
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        y = F.scaled_dot_product_attention(q, k, v)  # (B·T, 1, HW, C)
        y = self.proj(y.squeeze(1).transpose(1, 2).reshape(B * T, C, H, W))
        return x + y.reshape(B, T, C, H, W).permute(0, 2, 1, 3, 4)


def _fold_taps(w: Tensor, dim: int, phase: int) -> Tensor:
    """3 kernel taps along `dim` → the 2 a nearest-2x-upsampled pixel of `phase` sees: (w0, w1+w2) or (w0+w1, w2)."""
    w0, w1, w2 = w.unbind(dim)
    return torch.stack([w0, w1 + w2] if phase == 0 else [w0 + w1, w2], dim)


def _interleave_frames(head: Tensor, y: Tensor, fmt: torch.memory_format) -> Tensor:
    """`head` then the time conv's (B, 2C, T, H, W) output as 2T frames (2i from channels [0, C), 2i+1 from
    [C, 2C)), written with one copy into a buffer of layout `fmt` (the reference reshapes, then concatenates)."""
    B, C2, T, H, W = y.shape
    C, h = C2 // 2, head.shape[2]
    out = torch.empty((B, C, h + 2 * T, H, W), dtype=y.dtype, device=y.device, memory_format=fmt)
    if h:
        out[:, :, :h].copy_(head)
    out[:, :, h:].unflatten(2, (T, 2)).copy_(y.unflatten(1, (2, C)).permute(0, 2, 3, 1, 4, 5))
    return out


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

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        if self.time_conv is not None:
            x = self._double_frames(x, cache, opts)
        conv = self.resample["1"]
        if opts is not None and opts.subpixel_upsample:
            return _per_frame(lambda y: self._subpixel(y, opts), x)
        return _per_frame(lambda y: conv(F.interpolate(y, scale_factor=2.0, mode="nearest")), x)

    def _double_frames(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        head = x[:, :, :0]
        if self.cache_key not in cache.started:
            cache.started.add(self.cache_key)
            if cache.first_frame_bypass:
                head, x = x[:, :, :1], x[:, :, 1:]
        if x.shape[2] == 0:
            return head
        B, C, T, H, W = x.shape
        past = cache.frames.get(self.time_conv.cache_key)
        y = self.time_conv(x, cache)
        if cache.krea_upsample_history and T == 1:  # Krea's decoder (CausalConvCache.krea_upsample_history)
            previous = past[:, :, -1:] if past is not None else torch.zeros_like(x)
            cache.frames[self.time_conv.cache_key] = torch.cat([torch.where(previous == 0, 0, x), x], dim=2)
        if opts is not None and (opts.fused or opts.channels_last):
            return _interleave_frames(head, y, memory_format_for(opts))
        y = y.reshape(B, 2, C, T, H, W)  # (B, 2, C, T, H, W)
        y = y.permute(0, 2, 3, 1, 4, 5).reshape(B, C, 2 * T, H, W)  # frame 2i from half 0, 2i+1 from half 1
        return torch.cat([head, y], dim=2)

    def _subpixel(self, y: Tensor, opts: VAEDecodeOptions) -> Tensor:
        """conv3x3(nearest2x(y)) for frames y (N, C, H, W) as one 2x2 conv on y and a pixel shuffle.

        Output pixel (2i+a, 2j+b) sees input rows i−1, i (a = 0) or i, i+1 (a = 1) and likewise columns:
        the 3x3 taps that land on the same input pixel are summed into a 2x2 kernel per phase (a, b).
        With padding 1 the 2x2 conv gives (H+1, W+1) outputs; phase (a, b) is read at offset (a, b).
        """
        weight, bias = self._subpixel_params(memory_format_for(opts, 4))
        z = F.conv2d(y, weight, bias, padding=1)  # (N, 4·C_out, H+1, W+1), channels (a, b, c)
        N, _, H, W = y.shape
        c_out = weight.shape[0] // 4
        out = torch.empty(
            (N, c_out, 2 * H, 2 * W), dtype=z.dtype, device=z.device, memory_format=memory_format_for(opts, 4)
        )
        phases = out.unflatten(2, (H, 2)).unflatten(4, (W, 2))  # (N, C_out, H, 2, W, 2)
        for a in (0, 1):
            for b in (0, 1):
                p = 2 * a + b
                phases[:, :, :, a, :, b].copy_(z[:, p * c_out : (p + 1) * c_out, a : a + H, b : b + W])
        return out

    def _subpixel_params(self, fmt: torch.memory_format) -> tuple[Tensor, Tensor | None]:
        """The 4 phase kernels (4·C_out, C_in, 2, 2), taps summed in fp32 and rounded once to the weight dtype.

        Recomputed on every call (~20 small kernels, well under 1 % of an upsample's conv) rather than
        cached, so weights loaded or edited in place can never leave a stale copy behind.
        """
        conv = self.resample["1"]
        w32 = conv.weight.float()
        kernels = [_fold_taps(_fold_taps(w32, 2, a), 3, b) for a in (0, 1) for b in (0, 1)]
        weight = torch.cat(kernels, dim=0).to(conv.weight.dtype).contiguous(memory_format=fmt)
        bias = conv.bias.repeat(4) if conv.bias is not None else None
        return weight, bias


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

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
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
        cache.frames[self.cache_key] = seq[:, :, 2 * num_windows :].clone()
        if num_windows == 0:
            return head
        y = self.time_conv(seq[:, :, : 2 * num_windows + 1])  # (B, C, num_windows, H, W)
        return torch.cat([head, y], dim=2)


def assign_cache_keys(model: nn.Module) -> None:
    """Name every stateful layer by its module path, so cache entries are stable and readable."""
    for name, module in model.named_modules():
        if isinstance(module, CausalConv3d | Upsample | Downsample):
            module.cache_key = name
