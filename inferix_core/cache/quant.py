"""Quantized KV pages (KIVI-style int8 / int4) with a full-precision residual window.

Following KIVI (Liu et al., 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache"):
keys are quantized per channel (outliers sit in fixed channels), values per token; both asymmetric
min-max with round-to-nearest. Our group for keys is one latent frame (its T tokens), so a frame's codes
and scales live in its page and quantization acts on pages. Full precision is kept where it matters:

    live frames:  [ sink 0..S−1 ] [ middle: quantized pages ........ ] [ residual: last Rf frames ]
    storage:        fp ring slots   codes (uint8, 2 per byte for int4)    fp ring slots
                                    + K scale/zero per (frame, head, channel)
                                    + V scale/zero per (token, head)

A frame is quantized once, when a new block pushes it out of the residual window (Rf ≥ block_frames,
so the block being denoised, whose K/V every call rewrites, is always full precision). Reads gather the
span in chronological order and dequantize the middle on the fly. Not done: fused dequant-attention
kernels (the dequantized span is materialised per layer) and combining with offload.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import ConfigError
from .paged import CallPlan, PagedKVCache
from .spec import QUANT_BITS, KVCacheConfig, KVCacheSpec
from .table import DeviceIndex, token_slots

log = logging.getLogger(__name__)

BITS = QUANT_BITS  # bits per code of each quantization


def quantize(x: torch.Tensor, dim: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min-max quantization of `x` with statistics over `dim` (kept as size 1).

    Returns (codes uint8 in [0, 2^bits − 1], scale, zero) with x ≈ codes·scale + zero, in float32 math.
    """
    qmax = 2**bits - 1
    xf = x.float()
    lo, hi = xf.amin(dim=dim, keepdim=True), xf.amax(dim=dim, keepdim=True)
    scale = ((hi - lo) / qmax).clamp_min(1e-8)
    codes = ((xf - lo) / scale).round_().clamp_(0, qmax).to(torch.uint8)
    return codes, scale, lo


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """(…, D) codes in [0, 15] → (…, D/2) bytes: channel 2i in the low nibble, 2i+1 in the high one."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_int4: (…, D/2) → (…, D)."""
    return torch.stack([packed & 15, packed >> 4], dim=-1).flatten(-2)


class QuantStore:
    """Codes + scales in pages, plus a small full-precision ring for sink and residual frames."""

    kind = "quant"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec, num_frame_slots: int):
        if config.residual_frames < spec.block_frames:
            raise ConfigError(
                f"quantized KV cache needs residual_frames >= block_frames ({spec.block_frames}) so the block being "
                f"denoised stays full precision; got residual_frames={config.residual_frames}"
            )
        self.config, self.spec = config, spec
        self.bits = BITS[config.quantization]
        self.sink_frames = 0 if config.is_global else config.sink_frames
        self.residual_frames = config.residual_frames
        self.scale_dtype = spec.quant_scale_dtype
        self.num_frame_slots = 0
        self._alloc_pages(num_frame_slots)
        fp_tokens = (self.sink_frames + self.residual_frames) * spec.frame_tokens
        shape = (spec.batch_size, fp_tokens, spec.num_heads, spec.head_dim)
        self.fp_k = [torch.empty(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.num_layers)]
        self.fp_v = [torch.empty(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.num_layers)]
        dev = spec.device
        self._idx = {name: DeviceIndex(dev) for name in ("w", "r_fp", "r_qt", "r_qf", "p_fp", "p_qt", "p_qf")}
        self.reset()

    def _alloc_pages(self, num_frame_slots: int) -> None:
        s, dev = self.spec, self.spec.device
        b, t, h, d = s.batch_size, num_frame_slots * s.frame_tokens, s.num_heads, s.head_dim
        width = d * self.bits // 8

        def new(shape, dtype):
            return [torch.zeros(shape, dtype=dtype, device=dev) for _ in range(s.num_layers)]

        old = None if self.num_frame_slots == 0 else self._page_tensors()
        self.k_codes, self.v_codes = new((b, t, h, width), torch.uint8), new((b, t, h, width), torch.uint8)
        self.k_scale, self.k_zero = (
            new((b, num_frame_slots, h, d), self.scale_dtype),
            new((b, num_frame_slots, h, d), self.scale_dtype),
        )
        self.v_scale, self.v_zero = new((b, t, h, 1), self.scale_dtype), new((b, t, h, 1), self.scale_dtype)
        if old is not None:
            for dst, src in zip(self._page_tensors(), old):
                for a, c in zip(dst, src):
                    a[:, : c.shape[1]].copy_(c)
        self.num_frame_slots = num_frame_slots

    def _page_tensors(self) -> list[list[torch.Tensor]]:
        return [self.k_codes, self.v_codes, self.k_scale, self.k_zero, self.v_scale, self.v_zero]

    def grow(self, num_frame_slots: int) -> None:
        self._alloc_pages(num_frame_slots)

    def reset(self) -> None:
        self._pending_layers: set[int] = set()
        self._num_pending = 0
        self._n_sink = self._n_q = 0
        self.end_frame = 0
        self.quantized_frames = 0  # frame-layers quantized since reset

    # -- slot arithmetic (host) --------------------------------------------------------------------
    def fp_slot(self, frame: int) -> int:
        """Sink frame f → slot f; other frames → S + (f − S) mod Rf (a ring over the residual window)."""
        if frame < self.sink_frames:
            return frame
        return self.sink_frames + (frame - self.sink_frames) % self.residual_frames

    def _residual_start(self, end: int) -> int:
        return max(self.sink_frames, end - self.residual_frames)

    def _split(self, frames: list[int], end: int) -> tuple[list[int], list[int], list[int]]:
        """Chronological live frames → (sink, quantized middle, residual)."""
        rs = self._residual_start(end)
        sink = [f for f in frames if f < self.sink_frames]
        mid = [f for f in frames if self.sink_frames <= f < rs]
        res = [f for f in frames if f >= rs]
        return sink, mid, res

    def commit(self, plan: CallPlan) -> None:
        """Host plan → device indices; frames leaving the residual window are queued for quantization."""
        ft = self.spec.frame_tokens
        rs = self._residual_start(plan.end_frame)
        bad = [f for f in range(plan.start_frame, plan.start_frame + plan.num_frames) if self.sink_frames <= f < rs]
        if bad:
            raise ConfigError(
                f"quantized KV cache can only rewrite its last residual_frames={self.residual_frames} frames; "
                f"frame {bad[0]} is already quantized"
            )
        if self._pending_layers:  # a begin() without a transformer call: quantize what is still queued
            for layer in sorted(self._pending_layers):
                self._quantize_pending(layer)
        slot = dict(zip(plan.live_frames, plan.live_frame_slots.tolist()))
        leaving = [f for f in range(self._residual_start(plan.prev_end_frame), rs) if f in slot]
        if leaving:
            fp = np.array([self.fp_slot(f) for f in leaving], dtype=np.int64)
            pages = np.array([slot[f] for f in leaving], dtype=np.int64)
            self._p_fp = self._idx["p_fp"].load(token_slots(fp, ft))
            self._p_qt = self._idx["p_qt"].load(token_slots(pages, ft))
            self._p_qf = self._idx["p_qf"].load(pages)
            self._num_pending = len(leaving)
            self._pending_layers = set(range(self.spec.num_layers))
        write = np.array([self.fp_slot(f) for f in range(plan.start_frame, plan.start_frame + plan.num_frames)])
        self._w = self._idx["w"].load(token_slots(write, ft))
        sink, mid, res = self._split(list(plan.live_frames), plan.end_frame)
        self._r_fp = self._idx["r_fp"].load(token_slots(np.array([self.fp_slot(f) for f in sink + res]), ft))
        mid_slots = np.array([slot[f] for f in mid], dtype=np.int64)
        self._r_qt = self._idx["r_qt"].load(token_slots(mid_slots, ft))
        self._r_qf = self._idx["r_qf"].load(mid_slots)
        self._n_sink, self._n_q = len(sink) * ft, len(mid)
        self.end_frame = plan.end_frame

    # -- state (world files) -----------------------------------------------------------------------
    STATE_LISTS = ("k_codes", "v_codes", "k_scale", "k_zero", "v_scale", "v_zero")

    def state_lists(self, frame_slots, saving: bool) -> dict[str, list[torch.Tensor]]:
        """Codes, scales and zeros of every page plus the full-precision sink and residual ring; saving first
        quantizes what is still queued, as commit() does for a begin() without a call."""
        if saving:
            for layer in sorted(self._pending_layers):
                self._quantize_pending(layer)
        lists = {name: getattr(self, name) for name in self.STATE_LISTS}
        lists.update(fp_k=self.fp_k, fp_v=self.fp_v)
        return lists

    def state_meta(self) -> dict:
        return {"quant": {"end_frame": self.end_frame, "quantized_frames": self.quantized_frames}}

    def load_state_meta(self, meta: dict) -> None:
        self.end_frame = meta["quant"]["end_frame"]
        self.quantized_frames = meta["quant"]["quantized_frames"]

    # -- tensor work -------------------------------------------------------------------------------
    def _quantize_pending(self, layer: int) -> None:
        """Move the queued frames of `layer` from its fp ring into quantized pages."""
        b, ft, h, d = self.spec.batch_size, self.spec.frame_tokens, self.spec.num_heads, self.spec.head_dim
        nf = self._num_pending
        k = self.fp_k[layer].index_select(1, self._p_fp).view(b, nf, ft, h, d)
        v = self.fp_v[layer].index_select(1, self._p_fp)  # (B, nf·T, H, D)
        kc, ks, kz = quantize(k, dim=2, bits=self.bits)  # keys per channel over the frame's tokens
        vc, vs, vz = quantize(v, dim=3, bits=self.bits)  # values per token over head_dim
        if self.bits == 4:
            kc, vc = pack_int4(kc), pack_int4(vc)
        self.k_codes[layer].index_copy_(1, self._p_qt, kc.flatten(1, 2))
        self.k_scale[layer].index_copy_(1, self._p_qf, ks.squeeze(2).to(self.scale_dtype))
        self.k_zero[layer].index_copy_(1, self._p_qf, kz.squeeze(2).to(self.scale_dtype))
        self.v_codes[layer].index_copy_(1, self._p_qt, vc)
        self.v_scale[layer].index_copy_(1, self._p_qt, vs.to(self.scale_dtype))
        self.v_zero[layer].index_copy_(1, self._p_qt, vz.to(self.scale_dtype))
        self._pending_layers.discard(layer)
        self.quantized_frames += nf

    def _dequantized(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The quantized middle of the span, dequantized: (B, n_q·T, H, D) in the cache dtype."""
        b, ft, h, d = self.spec.batch_size, self.spec.frame_tokens, self.spec.num_heads, self.spec.head_dim
        kc, vc = self.k_codes[layer].index_select(1, self._r_qt), self.v_codes[layer].index_select(1, self._r_qt)
        if self.bits == 4:
            kc, vc = unpack_int4(kc), unpack_int4(vc)
        ks = self.k_scale[layer].index_select(1, self._r_qf).float().unsqueeze(2)  # (B, n_q, 1, H, D)
        kz = self.k_zero[layer].index_select(1, self._r_qf).float().unsqueeze(2)
        k = (kc.view(b, self._n_q, ft, h, d).float() * ks + kz).view(b, self._n_q * ft, h, d)
        vs = self.v_scale[layer].index_select(1, self._r_qt).float()  # (B, n_q·T, H, 1)
        vz = self.v_zero[layer].index_select(1, self._r_qt).float()
        v = vc.float() * vs + vz
        return k.to(self.spec.dtype), v.to(self.spec.dtype)

    def _read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        k_fp, v_fp = self.fp_k[layer].index_select(1, self._r_fp), self.fp_v[layer].index_select(1, self._r_fp)
        if self._n_q == 0:
            return k_fp, v_fp
        kq, vq = self._dequantized(layer)
        s = self._n_sink  # chronological: sink, quantized middle, residual
        return (torch.cat([k_fp[:, :s], kq, k_fp[:, s:]], dim=1), torch.cat([v_fp[:, :s], vq, v_fp[:, s:]], dim=1))

    def write_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self._pending_layers:  # before the new block overwrites their fp slots
            self._quantize_pending(layer)
        self.fp_k[layer].index_copy_(1, self._w, k.to(self.spec.dtype))
        self.fp_v[layer].index_copy_(1, self._w, v.to(self.spec.dtype))
        return self._read(layer)

    def read_frames(self, layer: int, frames: list[int], frame_slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self._pending_layers:
            self._quantize_pending(layer)
        return self._read(layer)  # the current plan's span is exactly the live frames

    def prefetch(self, layer: int) -> None:
        """Resident: nothing to bring in."""

    def stats(self) -> dict:
        pages = sum(t.numel() * t.element_size() for group in self._page_tensors() for t in group)
        fp = sum(t.numel() * t.element_size() for t in self.fp_k + self.fp_v)
        elem = torch.empty((), dtype=self.spec.dtype).element_size()
        dense = 2 * self.spec.num_layers * self.k_codes[0].shape[1] * self.spec.num_heads * self.spec.head_dim * elem
        dense *= self.spec.batch_size
        return {
            "resident_bytes": pages + fp,
            "offloaded_bytes": 0,
            "quantized_page_bytes": pages,
            "residual_bytes": fp,
            "dense_equivalent_bytes": dense,
            "bits": self.bits,
            "quantized_frame_layers": self.quantized_frames,
        }


class QuantizedKVCache(PagedKVCache):
    """PagedKVCache with int8/int4 pages and a full-precision sink + residual ring; see the module docstring."""

    kind = "quant"

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec):
        super().__init__(config, spec, store_cls=QuantStore)

    def paged_ranges(self, end: int) -> list[tuple[int, int]]:
        """Only the quantized middle has pages: live non-sink frames older than the residual window."""
        residual_start = max(self.sink_frames, end - self.config.residual_frames)
        return [(self._ring_start(end), max(self._ring_start(end), residual_start))]
