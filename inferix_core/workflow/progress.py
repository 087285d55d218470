"""Progress and interrupt hooks for headless workflow runs.

The node pack's runtime adapter (nodes/comfy_runtime.py) reports per-block progress through the
`ProgressHook` returned by `current_progress()` when it runs outside ComfyUI, and calls
`check_interrupt()` between steps. Inside ComfyUI it uses ComfyUI's own progress bar instead; this
module never imports ComfyUI.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from ..errors import GenerationInterruptedError

log = logging.getLogger(__name__)


@runtime_checkable
class ProgressHook(Protocol):
    """What a long-running node reports to whoever runs it."""

    def start(self, total: int, desc: str = "") -> None:
        """Begin a bar of `total` units (blocks, steps, frames) labelled `desc`."""

    def update(self, n: int = 1, preview: Any = None) -> None:
        """Advance by `n` units; `preview` is an optional image (PIL, uint8 array) the runner may show."""

    def close(self) -> None:
        """Finish the bar; safe to call twice."""


class NullProgress:
    """A ProgressHook that does nothing (progress off, or nobody listening)."""

    def start(self, total: int, desc: str = "") -> None:
        pass

    def update(self, n: int = 1, preview: Any = None) -> None:
        pass

    def close(self) -> None:
        pass


class TqdmProgress:
    """A ProgressHook drawing a tqdm bar below the executor's per-node bar."""

    def __init__(self, position: int = 1):
        self.position = position
        self._bar: Any = None

    def start(self, total: int, desc: str = "") -> None:
        from tqdm.auto import tqdm

        self.close()
        self._bar = tqdm(total=total, desc=desc or None, position=self.position, leave=False, dynamic_ncols=True)

    def update(self, n: int = 1, preview: Any = None) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


_current: ProgressHook = NullProgress()
_interrupt = threading.Event()


def current_progress() -> ProgressHook:
    """The hook a node should report to right now (a NullProgress when nothing is running)."""
    return _current


@contextmanager
def use_progress(hook: ProgressHook) -> Iterator[ProgressHook]:
    """Make `hook` the current one for the duration of a node call, and close it afterwards."""
    global _current
    previous = _current
    _current = hook
    try:
        yield hook
    finally:
        hook.close()
        _current = previous


def request_interrupt() -> None:
    """Ask the running workflow to stop at the next check (thread-safe; e.g. from a signal handler)."""
    _interrupt.set()


def clear_interrupt() -> None:
    """Forget an earlier interrupt request (the executor does this before each run)."""
    _interrupt.clear()


def interrupt_requested() -> bool:
    """True when an interrupt was requested and not yet cleared."""
    return _interrupt.is_set()


def check_interrupt() -> None:
    """Raise GenerationInterruptedError when an interrupt was requested; nodes call this between steps."""
    if _interrupt.is_set():
        raise GenerationInterruptedError("generation was interrupted")
