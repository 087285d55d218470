"""Spatially sliced decode of the Wan VAE decoder's high-resolution stages: row bands with a halo.

One latent frame's decode at 480×832 needs ~4 full-resolution activations of 292 MiB at once (bf16), too
much for an 8 GB card beside the transformer. Every op after the middle block couples only neighbouring
rows: 3×3(×3) causal convs (1 row each side per conv, zero padding at the image border), RMS norms and SiLU
(per pixel), the upsample's nearest 2× + 3×3 conv or its sub-pixel twin (a contamination of c input rows
becomes 2c + 1 output rows) and its time conv (kernel 3×1×1: none). So a band of output rows computed
from its input rows plus a halo as wide as the remaining layers' receptive field equals the same rows of
the whole-frame decode; only the middle block's attention needs the whole frame (it stays unbanded).

The causal time cache goes band-wise too: each temporal conv's entry (its last input frames at its stage's
resolution) is sliced with the band's halo for the band's call and the band's core rows are written back.
When the cache owns its entries (`CausalConvCache.owned`: made here and never forked) they are updated in
place, keeping a copy of the few old rows the next band's halo still needs; otherwise new entries are
allocated, so a forked state is never changed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .layers import AttentionBlock, CausalConv3d, CausalConvCache, ResidualBlock, Upsample, memory_format_for
from .options import VAEDecodeOptions


def _spatial_reach(conv: nn.Module) -> int:
    """Rows a conv's output depends on beyond its own, each side (padding of a stride-1 conv)."""
    k = conv.kernel_size[-2]
    return (k - 1) // 2


def receptive_halo(layers: Sequence[nn.Module]) -> tuple[int, int]:
    """(halo, scale) of running `layers` on a row band: input rows needed each side so that every output row
    of the band's core is exact, and the output rows per input row.

    A band edge is zero-padded where the whole frame had real rows, so the rows next to it are wrong: c rows
    after a conv of reach r become c + r, an upsample's 2c + 1 (nearest 2× then a 3×3 conv, or the sub-pixel
    2×2 conv read at two phases: the same rows). The halo is the wrong rows at the end, in input rows.
    """
    wrong, scale = 0, 1
    for layer in layers:
        if isinstance(layer, AttentionBlock):
            raise ConfigError("row bands cannot include an attention block (it mixes every row of a frame)")
        if isinstance(layer, Upsample):
            wrong, scale = 2 * wrong + _spatial_reach(layer.resample["1"]), 2 * scale
        elif isinstance(layer, ResidualBlock):
            wrong += _spatial_reach(layer.residual["2"]) + _spatial_reach(layer.residual["6"])
        else:
            wrong += sum(_spatial_reach(m) for m in layer.modules() if isinstance(m, CausalConv3d))
    return math.ceil(wrong / scale), scale


def cache_scales(layers: Sequence[nn.Module]) -> dict[str, int]:
    """Cache key → its entry's rows per input row of `layers` (temporal convs only)."""
    scales, scale = {}, 1
    for layer in layers:
        for m in layer.modules():
            if isinstance(m, CausalConv3d) and m.history_frames:
                scales[m.cache_key] = scale  # an upsample's time conv runs before its spatial 2×
        if isinstance(layer, Upsample):
            scale *= 2
    return scales


def band_cores(rows: int, bands: int) -> list[tuple[int, int]]:
    """`bands` contiguous row ranges covering [0, rows), sizes differing by at most one."""
    bands = max(1, min(bands, rows))
    edges = [round(i * rows / bands) for i in range(bands + 1)]
    return list(itertools.pairwise(edges))


class _BandFrames(dict):
    """A band's cache entries. A read assembles the old rows with the halo when a layer asks (not before: a
    read may copy, and all of them at once would be ~ the state's size); a write goes straight to the full
    entry's core rows, so a band never holds its new entries all at once either."""

    def __init__(self, entries: _BandedEntries, a0: int, a1: int, c0: int, c1: int) -> None:
        super().__init__()
        self.entries, self.a0, self.a1, self.c0, self.c1 = entries, a0, a1, c0, c1
        self.done: set[str] = set()  # entries this band wrote (their old rows are not read again)

    def get(self, key: str, default: Tensor | None = None) -> Tensor | None:
        e = self.entries
        if key in e.scales:
            if key in self.done or key not in e.old:
                return default
            s = e.scales[key]
            return e.old_rows(key, s * self.a0, s * self.a1)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Tensor:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def __setitem__(self, key: str, value: Tensor) -> None:
        if key in self.entries.scales:
            self.entries.store(key, value, self.a0, self.c0, self.c1)
            self.done.add(key)
        else:
            super().__setitem__(key, value)


class _BandedEntries:
    """Reads of the old cache rows with a halo and write-backs of each band's core, for one cache."""

    def __init__(self, cache: CausalConvCache, scales: dict[str, int], rows: int) -> None:
        self.cache, self.scales, self.rows = cache, scales, rows
        self.old = {k: cache.frames[k] for k in scales if k in cache.frames}
        self.target: dict[str, Tensor] = {}  # the entries being written: the old ones (owned) or new ones
        self.written: dict[str, int] = {}  # per entry: input rows [0, written) written back so far
        self.saved: dict[str, tuple[int, Tensor]] = {}  # in place: old rows [start, written·s) overwritten already
        self.next_a0: int | None = None  # the next band's first input row (None: this is the last band)

    def old_rows(self, key: str, lo: int, hi: int) -> Tensor:
        """Rows [lo, hi) of the entry as it was before this decode (rows of the entry's own resolution)."""
        old, s = self.old[key], self.scales[key]
        boundary = self.written.get(key, 0) * s if key in self.saved else 0
        if lo >= boundary:
            return old[..., lo:hi, :]
        start, saved = self.saved[key]
        assert lo >= start, "a band reached above the rows kept for it"
        head = saved[..., lo - start :, :]
        return head if hi <= boundary else torch.cat([head, old[..., boundary:hi, :]], dim=-2)

    def band_cache(self, a0: int, a1: int, c0: int, c1: int) -> CausalConvCache:
        c = self.cache
        band = CausalConvCache({}, set(c.started), c.first_frame_bypass, c.krea_upsample_history)
        band.frames = _BandFrames(self, a0, a1, c0, c1)
        return band

    def store(self, key: str, new: Tensor, a0: int, c0: int, c1: int) -> None:
        """Copy the band's core rows [c0, c1) of a new entry; first keep the old rows the next band reads."""
        s = self.scales[key]
        if key not in self.target:
            old = self.old.get(key)
            full = (*new.shape[:-2], s * self.rows, new.shape[-1])
            in_place = key in self.cache.owned and not self.cache.krea_upsample_history  # Krea rereads its old entry
            if old is not None and in_place and tuple(old.shape) == full:
                self.target[key] = old  # ours alone: updated in place
            else:
                fmt = torch.channels_last_3d if _is_ndhwc(new) else torch.contiguous_format
                self.target[key] = torch.empty(full, dtype=new.dtype, device=new.device, memory_format=fmt)
        target = self.target[key]
        first = self.written.get(key, 0) < c1  # a second write in one call (Krea's history) overwrites the first
        if first and self.next_a0 is not None and key in self.old and target is self.old[key]:
            self.saved[key] = (s * self.next_a0, self.old_rows(key, s * self.next_a0, s * c1).clone())
        target[..., s * c0 : s * c1, :].copy_(new[..., s * (c0 - a0) : s * (c1 - a0), :])
        self.written[key] = c1

    def finish(self, started: set[str]) -> None:
        for key, t in self.target.items():
            self.cache.frames[key] = t
            self.cache.owned.add(key)
        self.cache.started |= started


def _is_ndhwc(x: Tensor) -> bool:
    return x.ndim == 5 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d)


def run_in_row_bands(
    layers: Sequence[nn.Module],
    x: Tensor,
    cache: CausalConvCache,
    opts: VAEDecodeOptions | None,
    bands: int,
    halo: int | None = None,
) -> Tensor:
    """`layers` (each called as layer(x, cache, opts)) on x (B, C, T, H, W) in `bands` row bands; equal to
    running them on the whole of x (up to rounding), with `cache` advanced the same way.

    `halo` overrides the receptive field (`receptive_halo`; tests shrink it to see the bands go wrong).
    """
    rf, scale = receptive_halo(layers)
    halo = rf if halo is None else halo
    rows = x.shape[-2]
    cores = band_cores(rows, bands)
    entries = _BandedEntries(cache, cache_scales(layers), rows)
    out, started = None, set(cache.started)
    fmt = memory_format_for(opts) if opts is not None else torch.contiguous_format
    for j, (c0, c1) in enumerate(cores):
        a0, a1 = max(0, c0 - halo), min(rows, c1 + halo)
        entries.next_a0 = max(0, cores[j + 1][0] - halo) if j + 1 < len(cores) else None
        band = entries.band_cache(a0, a1, c0, c1)
        y = x[..., a0:a1, :].contiguous(memory_format=fmt)
        for layer in layers:
            y = layer(y, band, opts)
        if out is None:
            shape = (*y.shape[:-2], rows * scale, y.shape[-1])
            out_fmt = torch.channels_last_3d if _is_ndhwc(y) else torch.contiguous_format
            out = torch.empty(shape, dtype=y.dtype, device=y.device, memory_format=out_fmt)
        out[..., scale * c0 : scale * c1, :].copy_(y[..., scale * (c0 - a0) : scale * (c1 - a0), :])
        del y
        started |= band.started
        del band
    entries.finish(started)
    assert out is not None
    return out
