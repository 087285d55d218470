"""An in-memory, thread-safe, bounded queue of decoded blocks, for the live view and Python callers.

The producer (the block loop) never waits on a slow consumer unless asked to: by default a full queue
drops its oldest block and counts it. It holds host numpy arrays only, never device tensors.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferix_core.errors import ConfigError
from inferix_core.sinks.base import FrameSink, to_uint8_frames


@dataclass(frozen=True)
class FrameBlock:
    """One decoded block as queued: frames ``[T, H, W, 3]`` uint8 and when it arrived (perf_counter s)."""

    block_index: int
    frames: np.ndarray
    time_s: float


class FrameQueue(FrameSink):
    """Bounded FIFO of ``FrameBlock``; ``close()`` ends iteration once the queue is drained.

    Args:
        max_blocks: capacity in blocks.
        drop_oldest: when full, drop the oldest block (live use) instead of blocking the producer.
    """

    def __init__(self, max_blocks: int = 8, drop_oldest: bool = True):
        if max_blocks < 1:
            raise ConfigError(f"max_blocks must be at least 1, got {max_blocks}.")
        self.max_blocks, self.drop_oldest = max_blocks, drop_oldest
        self.num_dropped = 0
        self._items: deque[FrameBlock] = deque()
        self._cond = threading.Condition()

    def write(self, frames: Any, block_index: int) -> None:
        """Enqueue a block (copied to host numpy); blocks while full unless ``drop_oldest``."""
        item = FrameBlock(block_index, to_uint8_frames(frames), time.perf_counter())
        with self._cond:
            if self.closed:
                raise ConfigError("FrameQueue is closed; create a new one for a new run.")
            while len(self._items) >= self.max_blocks:
                if self.drop_oldest:
                    self._items.popleft()
                    self.num_dropped += 1
                else:
                    self._cond.wait()
            self._items.append(item)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> FrameBlock | None:
        """Next block, or ``None`` when closed and empty, or when ``timeout`` seconds pass."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self.closed, timeout):
                return None
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def __iter__(self) -> Iterator[FrameBlock]:
        while (item := self.get()) is not None:
            yield item

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def close(self) -> None:
        """Mark the end of the stream; consumers finish what is queued, then stop."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
