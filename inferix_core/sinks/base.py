"""The sink interface: where decoded pixel frames go, one block at a time.

The pipeline hands every decoded block to a sink as uint8 ``[T, H, W, 3]`` (numpy or torch). Sinks own
their files, sockets and queues, and must leave something usable behind when the run is interrupted, so
``close()`` is also what runs on the exception path. This module does not encode or display anything.
"""

from __future__ import annotations

import logging
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import numpy as np

from inferix_core.errors import ShapeMismatchError

logger = logging.getLogger(__name__)


def to_uint8_frames(frames: Any) -> np.ndarray:
    """Return ``frames`` as a C-contiguous uint8 numpy array ``[T, H, W, 3]``, checking the layout.

    Torch tensors are moved to the host here (one copy per block), so sinks never touch devices.
    """
    if hasattr(frames, "detach") and hasattr(frames, "cpu"):  # torch.Tensor, without importing torch
        frames = frames.detach().cpu().numpy()
    array = np.asarray(frames)
    if array.ndim != 4 or array.shape[-1] != 3:
        raise ShapeMismatchError(
            f"sink frames have shape {tuple(array.shape)}; expected [T, H, W, 3] (frames last-channel RGB). "
            "Convert VAE output [B, 3, T, H, W] in [-1, 1] with ((x + 1) * 127.5).round().clamp(0, 255)"
            ".to(torch.uint8)[0].permute(1, 2, 3, 0)."
        )
    if array.dtype != np.uint8:
        raise ShapeMismatchError(f"sink frames have dtype {array.dtype}; expected uint8 in [0, 255].")
    if array.shape[0] == 0 or array.shape[1] == 0 or array.shape[2] == 0:
        raise ShapeMismatchError(f"sink frames have an empty dimension: shape {tuple(array.shape)}.")
    return np.ascontiguousarray(array)


@contextmanager
def deferred_signals(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then deliver them to the handlers that were there.

    Why: publishing an output (truncate, link, unlink) must not be cut in half by a second Ctrl-C, or a
    partial file is left behind. Outside the main thread (ComfyUI's worker) handlers cannot change; the
    block then runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for signum in signums:
        previous[signum] = signal.signal(signum, lambda s, f: caught.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in caught[:1]:  # one delivery is enough to act on
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


class FrameSink(ABC):
    """Receives decoded blocks in order; ``close()`` finalises and is safe to call twice.

    Used as a context manager, ``close()`` also runs when the block loop raises (including
    ``KeyboardInterrupt``), so whatever was written so far is kept.
    """

    closed: bool = False

    @abstractmethod
    def write(self, frames: Any, block_index: int) -> None:
        """Consume one decoded block.

        Args:
            frames: uint8 ``[T, H, W, 3]`` numpy array or torch tensor (any device).
            block_index: index of the block in the run, starting at 0.
        """

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources; idempotent."""

    def __enter__(self) -> FrameSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            logger.info("%s closing after %s; keeping what was written", type(self).__name__, exc_type.__name__)
        self.close()


class MultiSink(FrameSink):
    """Fans each block out to several sinks; frames are converted to numpy once for all of them."""

    def __init__(self, sinks: Iterable[FrameSink]):
        self.sinks: list[FrameSink] = list(sinks)

    def write(self, frames: Any, block_index: int) -> None:
        array = to_uint8_frames(frames)
        for sink in self.sinks:
            sink.write(array, block_index)

    def close(self) -> None:
        """Close every sink even if one fails, then re-raise the first failure."""
        if self.closed:
            return
        self.closed = True
        first_error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except BaseException as error:  # close the others first
                logger.exception("closing %s failed", type(sink).__name__)
                first_error = first_error or error
        if first_error is not None:
            raise first_error
