"""ShotSinkKVCache: a sink + sliding window that can pin the first frames of a shot (LongLive 2.0 multi-shot).

NVlabs/LongLive main (`multi_shot_sink: true`, pipeline/causal_diffusion_inference.py `_pin_current_chunk`,
wan_5b/modules/causal_model.py `CausalWanSelfAttention.forward` and `_apply_cache_updates`) keeps one
buffer of `window` frames per layer, written in order and rolled left when full. Its rule, in frames
(S = sink frames, which is also their `global_sink_size` with multi-shot sinks on; P = pinned frames):

* after the context pass of a shot's first block (a block whose prompt starts a new shot), the first
  P = min(S, block) frames of that block are *pinned* at their buffer position p (one pin at a time: a
  new shot's pin replaces the old one, whose frames then roll away like any others);
* a write of new frames that overflows the buffer evicts `ev` frames starting at the protected prefix E:
  E = S + P when the pin sits right after the sink (p == S), else E = S; a pin after E moves left with
  the roll (p −= ev), so it slides to the front of the window and then stays there, a second sink;
* the attention span is the whole buffer (their buffer and attention window are the same size).

This class keeps that buffer order as a list of frames and maps each frame to a storage slot of the
ring's buffers (`RingKVCache`), so writes and reads are the ring's: the valid slots are always a
prefix, and attention is order-free over keys (RoPE is applied before they are stored). Only the
bookkeeping differs, and it is host-side Python as everywhere else in the cache layer.
"""

from __future__ import annotations

from ..errors import ConfigError
from .ring import RingKVCache
from .spec import KVCacheConfig, KVCacheSpec
from .state import Snapshot


class ShotSinkKVCache(RingKVCache):
    """Resident sink + window cache with LongLive 2.0's pinned shot sink (module docstring)."""

    def __init__(self, config: KVCacheConfig, spec: KVCacheSpec):
        if config.is_global:
            raise ConfigError("shot sinks need a sliding window (window_frames > 0); a global cache evicts nothing")
        super().__init__(config, spec)
        self._reset_order()

    def _reset_order(self) -> None:
        self._order: list[int] = []  # resident frames in the reference's buffer order
        self._slot: dict[int, int] = {}  # frame -> storage slot (in frames)
        self._free: list[int] = []  # slots given up by evicted frames
        self.pin_position = -1  # index into _order of the first pinned frame (-1: no pin)
        self.pin_frames = 0
        self.num_pins = 0

    # -- state (world files): the ring's, plus the frame order, slots and the pinned shot sink ------------
    state_kind = "shot_sink"

    def state_dict(self, prefix: str = "") -> Snapshot:
        tensors, meta = super().state_dict(prefix)
        meta.update(
            order=list(self._order), slots=[[f, s] for f, s in self._slot.items()], free=list(self._free),
            pin_position=self.pin_position, pin_frames=self.pin_frames, num_pins=self.num_pins,
        )  # fmt: skip
        return tensors, meta

    def load_state_dict(self, tensors: dict, meta: dict, prefix: str = "") -> None:
        super().load_state_dict(tensors, {**meta, "window_origin": self.window_origin}, prefix)
        self._order = [int(f) for f in meta["order"]]
        self._slot = {int(f): int(s) for f, s in meta["slots"]}
        self._free = [int(s) for s in meta["free"]]
        self.pin_position, self.pin_frames, self.num_pins = meta["pin_position"], meta["pin_frames"], meta["num_pins"]

    # -- bookkeeping (host only) -------------------------------------------------------------------
    def slot_of(self, frame: int) -> int:
        return self._slot[frame]

    def resident_frames(self) -> list[int]:
        """Absolute frame indices in buffer order: the sink, a pin that reached the front, then the window."""
        return list(self._order)

    @property
    def has_pin(self) -> bool:
        return self.pin_position >= 0 and self.pin_frames > 0

    def protected_frames(self) -> int:
        """E: the buffer prefix a roll keeps (the sink, plus the pin once it sits right after the sink)."""
        if self.has_pin and self.pin_position == self.sink_frames:
            return self.sink_frames + self.pin_frames
        return self.sink_frames

    def pin_shot(self, start_frame: int, num_frames: int) -> None:
        """Pin the first min(sink, num_frames) frames of the block [start_frame, +num_frames) just written.

        Their `_pin_current_chunk`: the block is the newest in the buffer (its context pass came last);
        with no sink frames nothing is pinned (their `_is_scene_cut` is false then).
        """
        if self.sink_frames == 0:
            return
        position = len(self._order) - num_frames
        if position < 0 or self._order[position:] != list(range(start_frame, start_frame + num_frames)):
            raise ConfigError(
                f"pin_shot({start_frame}, {num_frames}) must follow the block's own context pass; the newest "
                f"resident frames are {self._order[-num_frames:]}"
            )
        self.pin_position = position
        self.pin_frames = min(self.sink_frames, num_frames)
        self.num_pins += 1

    def begin(self, start_frame: int, num_frames: int) -> None:
        """Plan a call over [start_frame, start_frame + num_frames): roll for new frames, then write."""
        end = start_frame + num_frames
        if start_frame > self.end_frame:
            raise ConfigError(
                f"KV cache write at frame {start_frame} leaves a gap: frames up to {self.end_frame} are cached"
            )
        stale = [f for f in range(start_frame, min(end, self.end_frame)) if f not in self._slot]
        if stale:
            raise ConfigError(f"frames {stale[0]}..{stale[-1]} were already evicted from the window; cannot rewrite")
        new = list(range(max(start_frame, self.end_frame), end))
        if new:
            self._roll(len(new))
            for f in new:  # freed slots first; with none free, the used slots are 0..len-1
                self._slot[f] = self._free.pop(0) if self._free else len(self._slot)
                self._order.append(f)
            self.end_frame = end
        ft = self.spec.frame_tokens
        self._plan_writes([self._slot[f] for f in range(start_frame, end)])
        self._num_tokens = num_frames * ft
        self._valid_tokens = len(self._order) * ft
        self.num_calls += 1

    def _roll(self, num_new: int) -> None:
        """Evict what `num_new` new frames push out of the buffer, as their roll does."""
        evict = len(self._order) + num_new - self.capacity_frames
        if evict <= 0:
            return
        keep = self.protected_frames()
        if keep + num_new > self.capacity_frames:
            raise ConfigError(
                f"window_frames={self.capacity_frames} cannot hold sink_frames={self.sink_frames}, a pinned shot "
                f"sink of {self.pin_frames} frames and a block of {num_new}; raise window_frames to at least "
                f"{keep + num_new}"
            )
        gone = self._order[keep : keep + evict]
        del self._order[keep : keep + evict]
        for f in gone:
            self._free.append(self._slot.pop(f))
        if self.has_pin and self.pin_position >= keep:  # a floating pin follows the data it tracks
            self.pin_position -= evict
        self.num_evictions += len(gone)
        self.num_eviction_events += 1

    # -- views and lifecycle -----------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self._reset_order()

    def restart(self, start_frame: int) -> None:
        raise ConfigError(
            "a cache with shot sinks cannot be re-based for a re-cache; LongLive 2.0 switches prompts without "
            "one (a hard switch: keep the cached K/V)"
        )

    def stats(self) -> dict:
        return {**super().stats(), "kind": "shot_sink", "pinned_frames": self.pin_frames if self.has_pin else 0}
