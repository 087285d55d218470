"""The window bookkeeping ring and paged caches share: where the window starts, and restarting it.

A sliding window with S sink frames keeps frames [0, S) and the most recent frames from
`window_origin` on. `window_origin` is S after reset(); `restart()` moves it (a re-cache under a new
prompt writes the sink frames again, then jumps to the window's first block). Each cache's class
docstring says how its storage follows the new origin.
"""

from __future__ import annotations

from ..errors import ConfigError
from .spec import KVCacheConfig


class SlidingWindow:
    """Mixin of RingKVCache and PagedKVCache: `window_origin` and the public `restart()`.

    The class provides `config`, `sink_frames`, `end_frame`, `num_evictions` and `resident_frames()`.
    """

    config: KVCacheConfig
    sink_frames: int
    end_frame: int
    num_evictions: int
    window_origin: int  # no non-sink frame before it is live; moved only by restart()

    def resident_frames(self) -> list[int]:
        raise NotImplementedError

    def reset_window(self) -> None:
        """Back to a fresh stream: the window starts right after the sink frames."""
        self.window_origin = self.sink_frames

    def restart(self, start_frame: int) -> None:
        """Continue writing at `start_frame`, treating frames [end_frame, start_frame) as already evicted."""
        if self.config.is_global:
            raise ConfigError("a global KV cache keeps every frame, so it cannot skip frames; write them in order")
        if start_frame < self.end_frame:
            raise ConfigError(f"restart({start_frame}) would go back: frames up to {self.end_frame} are cached")
        if self.end_frame < self.sink_frames:
            raise ConfigError(
                f"restart({start_frame}) before the {self.sink_frames} sink frames are written "
                f"(only {self.end_frame} are); write the sink frames first"
            )
        if start_frame == self.end_frame:
            return
        before = len(self.resident_frames())
        self.end_frame = start_frame
        self.window_origin = start_frame
        self.num_evictions += before - len(self.resident_frames())
