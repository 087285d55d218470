"""RingKVCache: resident K/V for a sliding window with sink frames, as a ring (no shifting copies).

Slot layout of one layer's buffer, in whole latent frames (each frame = `frame_tokens` tokens)::

    slot:   0 .. S-1          | S .. S+R-1
            sink frames       | ring of the R = window − S most recent non-sink frames
    frame f  ->  slot f                     if f < S
             ->  slot S + (f − S) mod R     otherwise

Writing block frames [a, b) overwrites the ring slots of frames a−R .. b−R−1, which is exactly the
eviction of the reference (Self-Forcing causal_model.py, CausalWanSelfAttention.forward), which instead
shifts the whole buffer left with a copy. Attention is order-free over keys (RoPE is applied to keys
before they are stored), so reading slots in ring order gives the same result.

With window = −1 (global attention) the ring never wraps: slot = frame, and the buffer is sized for
the run's known length (grown, with a log line, if a stream runs longer).

All indices are host-side Python ints: no `.item()` and no device→host sync anywhere in a step. The
write goes through `index_copy_` with a device slot index committed once per block (table.DeviceIndex,
a non-blocking copy from pinned memory), so the same kernels with the same tensor storage run at
every step: a block step can be captured in a CUDA graph once the window is full.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from .interface import LayerKV
from .spec import KVCacheConfig, KVCacheSpec
from .state import Snapshot, counters_of, load_named_buffers, named_buffers, set_counters
from .table import DeviceIndex, copy_token_rows
from .window import SlidingWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Run:
    """One contiguous copy: new tokens [src, src+length) -> buffer tokens [dst, dst+length)."""

    dst: int
    src: int
    length: int


class RingKVCache(SlidingWindow):
    """Resident ring cache; see the module docstring for the slot layout.

    restart(W) (re-caching a window under a new prompt, inferix_core/clients/session.py) re-bases the ring so
    that frame W takes ring slot S, which keeps the valid slots a prefix of the buffer::

        before:  [sink 0..S-1 | ring: frames W..E-1 somewhere in S..S+R-1, wrapped]
        reset(); begin(0, S) ...; restart(W); begin(W, n) ...
        after:   [sink 0..S-1 | W, W+1, ... from slot S on]   (slot_of(f) = S + (f - W) mod R)
    """

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec):
        config.check_block(spec.block_frames)
        self.config = config
        self.spec = spec
        self.sink_frames = 0 if config.is_global else config.sink_frames
        if config.is_global:
            self.capacity_frames = spec.max_frames or 8 * spec.block_frames
        else:
            self.capacity_frames = config.window_frames
        self.ring_frames = self.capacity_frames if config.is_global else config.ring_frames
        tokens = self.capacity_frames * spec.frame_tokens
        shape = (spec.batch_size, tokens, spec.num_heads, spec.head_dim)
        self.k = [torch.empty(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.num_layers)]
        self.v = [torch.empty(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.num_layers)]
        self._views = [LayerKV(self, i) for i in range(spec.num_layers)]
        self.end_frame = 0  # frames [0, end_frame) have been written at least once
        self.reset_window()  # window_origin: the frame that sits in ring slot S; moved only by restart()
        self._runs: list[_Run] = []
        self._write_index = DeviceIndex(spec.device, capacity=spec.block_frames * spec.frame_tokens)
        self._w: torch.Tensor | None = None
        self._valid_tokens = 0
        self._num_tokens = 0
        self.num_evictions = 0  # frames dropped from the window, counted once per frame
        self.num_eviction_events = 0  # calls that dropped frames (the reference's eviction-branch count)
        self.num_calls = 0

    # -- bookkeeping (host only) -------------------------------------------------------------------
    def slot_of(self, frame: int) -> int:
        if self.config.is_global or frame < self.sink_frames:
            return frame
        return self.sink_frames + (frame - self.window_origin) % self.ring_frames

    def resident_frames(self) -> list[int]:
        """Absolute frame indices currently stored, sink first then oldest to newest."""
        sinks = list(range(min(self.sink_frames, self.end_frame)))
        start = max(self.window_origin, self.end_frame - self.ring_frames)
        return sinks + list(range(start, self.end_frame))

    def _plan_writes(self, slots: list[int]) -> None:
        """The copies of one call's frames into their buffer slots, adjacent slots merged into one run."""
        ft = self.spec.frame_tokens
        runs: list[_Run] = []
        for i, slot in enumerate(slots):
            dst = slot * ft
            if runs and runs[-1].dst + runs[-1].length == dst:
                last = runs[-1]
                runs[-1] = _Run(last.dst, last.src, last.length + ft)
            else:
                runs.append(_Run(dst, i * ft, ft))
        self._runs = runs
        self._w = self._write_index.load(
            np.concatenate([np.arange(r.dst, r.dst + r.length, dtype=np.int64) for r in runs])
        )

    def begin(self, start_frame: int, num_frames: int) -> None:
        """Prepare slots for a transformer call over frames [start_frame, start_frame + num_frames)."""
        end = start_frame + num_frames
        if start_frame > self.end_frame:
            raise ConfigError(
                f"KV cache write at frame {start_frame} leaves a gap: frames up to {self.end_frame} are cached"
            )
        resident = set(self.resident_frames())
        stale = [f for f in range(start_frame, min(end, self.end_frame)) if f not in resident]
        if stale:
            raise ConfigError(f"frames {stale[0]}..{stale[-1]} were already evicted from the window; cannot rewrite")
        if self.config.is_global and end > self.capacity_frames:
            self._grow(max(end, 2 * self.capacity_frames))
        self.end_frame = max(self.end_frame, end)
        evicted = len(resident - set(self.resident_frames()))
        self.num_evictions += evicted
        self.num_eviction_events += evicted > 0
        ft = self.spec.frame_tokens
        self._plan_writes([self.slot_of(f) for f in range(start_frame, end)])
        self._num_tokens = num_frames * ft
        self._valid_tokens = len(self.resident_frames()) * ft  # min(end_frame, capacity) unless restarted
        self.num_calls += 1

    def relabel(self, end_frame: int, window_origin: int) -> None:
        """Say which frames the slots hold after frames 0..E-1 were written as a fresh cache and stand for later
        ones (LongLive's `global_sink: false` re-cache, pipeline/recache.py): ring slots from S on hold frames
        [window_origin, end_frame), the sink slots what was written there. Host bookkeeping only; the same
        number of ring frames must stay resident."""
        ring = len(self.resident_frames()) - min(self.sink_frames, self.end_frame)
        if self.config.is_global or end_frame - window_origin != ring or window_origin < self.sink_frames:
            raise ConfigError(  # an invariant of the caller, not a user mistake
                f"relabel to frames {window_origin}..{end_frame - 1} does not match the {ring} ring frames written"
            )
        self.end_frame, self.window_origin = end_frame, window_origin

    # -- tensor work -------------------------------------------------------------------------------
    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if k.shape[1] != self._num_tokens:
            raise ConfigError(f"KV cache expected {self._num_tokens} new tokens (from begin()), got {k.shape[1]}")
        kb, vb = self.k[layer], self.v[layer]
        # runs are consecutive in the source, so the index lists destination slots in source order
        copy_token_rows(kb, self._w, k)
        copy_token_rows(vb, self._w, v)
        n = self._valid_tokens
        return kb[:, :n], vb[:, :n]

    def layer(self, index: int) -> LayerKV:
        return self._views[index]

    def graph_key(self) -> tuple:
        """What a CUDA graph of the planned call bakes in from this cache (models/wan/cuda_graphs.py).

        A captured `write_and_read` holds the storage addresses of every layer's K/V and of the write
        index, and the call's new / attended token counts (the shapes of the copy and the returned
        views). Two calls with equal keys run the same kernels on the same memory; what differs between
        them (which ring slots are written) reaches the device only through the write index, which
        `begin()` refills in place. So equal keys mean a graph captured for one is valid for the other.
        """
        if self._w is None:
            raise ConfigError("graph_key() before begin(): plan the call first")
        buffers = tuple(b.data_ptr() for b in (*self.k, *self.v))
        return ("ring", self._num_tokens, self._valid_tokens, self._w.data_ptr(), buffers)

    def logical_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of `layer` in sink-then-chronological frame order (the reference's buffer order)."""
        ft = self.spec.frame_tokens
        idx = [self.slot_of(f) for f in self.resident_frames()]
        k = torch.cat([self.k[layer][:, s * ft : (s + 1) * ft] for s in idx], dim=1)
        v = torch.cat([self.v[layer][:, s * ft : (s + 1) * ft] for s in idx], dim=1)
        return k, v

    def _grow(self, frames: int) -> None:
        log.info("global KV cache grows from %d to %d frames", self.capacity_frames, frames)
        extra = (frames - self.capacity_frames) * self.spec.frame_tokens
        self.k = [torch.cat([b, b.new_empty(b.shape[0], extra, *b.shape[2:])], dim=1) for b in self.k]
        self.v = [torch.cat([b, b.new_empty(b.shape[0], extra, *b.shape[2:])], dim=1) for b in self.v]
        self.capacity_frames = frames
        self.ring_frames = frames

    # -- state (world files) -----------------------------------------------------------------------
    state_kind = "ring"

    def state_dict(self, prefix: str = "") -> Snapshot:
        """The K/V buffers whole (slot layout included), the window origin and the counters."""
        meta = counters_of(self)
        meta.update(kind=self.state_kind, window_origin=self.window_origin, capacity_frames=self.capacity_frames)
        return named_buffers(prefix, {"k": self.k, "v": self.v}), meta

    def load_state_dict(self, tensors: dict, meta: dict, prefix: str = "") -> None:
        if meta["capacity_frames"] > self.capacity_frames:  # a global cache that had grown
            self._grow(meta["capacity_frames"])
        load_named_buffers(prefix, {"k": self.k, "v": self.v}, tensors)
        set_counters(self, meta)
        self.window_origin = meta["window_origin"]

    def reset(self) -> None:
        """Forget every frame (buffers are kept and overwritten)."""
        self.end_frame = 0
        self.reset_window()
        self._runs = []
        self._valid_tokens = 0
        self.num_evictions = 0
        self.num_eviction_events = 0
        self.num_calls = 0

    @property
    def attended_tokens(self) -> int:
        """Tokens the last call attended to (the reference's local_end)."""
        return self._valid_tokens

    def stats(self) -> dict:
        elem = self.k[0].element_size() if self.k else 0
        resident = sum(b.numel() for b in self.k + self.v) * elem
        return {
            "kind": "ring",
            "capacity_frames": self.capacity_frames,
            "resident_frames": len(self.resident_frames()),
            "frames_written": self.end_frame,
            "evicted_frames": self.num_evictions,
            "resident_bytes": resident,
            "offloaded_bytes": 0,
        }
