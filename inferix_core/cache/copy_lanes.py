"""Copy lanes of the offloaded KV cache: a CUDA stream, or its CPU emulation (a queue run eagerly or deferred)
so the same ordering is exercised without a GPU, and the events that time them."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import torch


# -- copy lanes: a CUDA stream, or its CPU emulation -----------------------------------------------------
class HostEvent:
    """CPU stand-in for a CUDA event: position `seq` in a HostLane's queue (None: already happened)."""

    __slots__ = ("lane", "seq", "time")

    def __init__(self, lane: HostLane | None = None, seq: int = 0):
        self.lane, self.seq, self.time = lane, seq, None if lane is not None else time.perf_counter()

    def query(self) -> bool:
        return self.lane is None or self.lane.done >= self.seq

    def synchronize(self) -> None:
        if self.lane is not None:
            self.lane.run_until(self.seq)


class HostLane:
    """CPU emulation of a side stream: an in-order queue of copies and waits.

    "deferred": an entry runs only when an event after it is waited on (the latest a GPU could run it);
    "eager": it runs when enqueued (program order). A missing wait shows as wrong values in one of them.
    """

    def __init__(self, schedule: str = "deferred"):
        self.schedule = schedule
        self.queue: deque[Callable[[], None]] = deque()
        self.issued = self.done = 0

    def _put(self, fn: Callable[[], None]) -> None:
        self.queue.append(fn)
        self.issued += 1
        if self.schedule == "eager":
            self.run_until(self.issued)

    def run_until(self, seq: int) -> None:
        while self.done < seq:
            fn = self.queue.popleft()
            self.done += 1  # before running: a wait inside may recurse into another lane, never into this one
            fn()

    def wait(self, event: HostEvent | None) -> None:
        if event is not None:
            self._put(event.synchronize)

    def record(self, timing: bool = False) -> HostEvent:
        ev = HostEvent(self, self.issued + 1)
        self._put(lambda: setattr(ev, "time", time.perf_counter()))
        return ev

    def copies(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for dst, src in pairs:
            self._put(lambda dst=dst, src=src: dst.copy_(src))

    def synchronize(self) -> None:
        self.run_until(self.issued)


class CudaLane:
    """A CUDA side stream (or, with stream=None, whatever stream is current: the compute stream)."""

    def __init__(self, device: torch.device, side: bool):
        self.device = device
        self.stream = torch.cuda.Stream(device=device) if side else None

    def _s(self) -> torch.cuda.Stream:
        return self.stream if self.stream is not None else torch.cuda.current_stream(self.device)

    def wait(self, event: torch.cuda.Event | None) -> None:
        if event is not None:
            self._s().wait_event(event)

    def record(self, timing: bool = False) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=timing)
        ev.record(self._s())
        return ev

    def copies(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Enqueue dst.copy_(src) for each pair; host sides are pinned, so each is one async memcpy."""
        with torch.cuda.stream(self._s()):
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)

    def synchronize(self) -> None:
        self._s().synchronize()


class ComputeLane:
    """CPU: the compute "stream" is the host itself; a wait runs the side lane up to the event."""

    def wait(self, event: HostEvent | None) -> None:
        if event is not None:
            event.synchronize()

    def record(self, timing: bool = False) -> HostEvent:
        return HostEvent()

    def synchronize(self) -> None:
        """Nothing queued: compute ran as it was called."""


def elapsed_seconds(start, end) -> float | None:
    """end − start in seconds once both happened (CUDA events may be on different streams), else None."""
    if isinstance(start, HostEvent):
        return None if start.time is None or end.time is None else end.time - start.time
    if not (end.query() and start.query()):
        return None
    return start.elapsed_time(end) / 1000.0
