"""Count the bytes of the tensors a piece of code allocates, on any device (CPU and `meta` included).

The CUDA allocator reports its peak (`torch.cuda.max_memory_allocated`); the CPU and meta devices do
not. `LiveBytes` is a `TorchDispatchMode` that sees every ATen op's outputs, tracks each new storage
until it is freed (a weakref finalizer on the storage) and keeps the running total and its peak. On
`meta` tensors nothing is computed, so a full-size decode or transformer call can be counted on a
laptop; this is how the memory planner's formulas are derived and tested (docs/memory.md).

What it does not see: memory an op allocates internally and frees before returning (cuDNN/cuBLAS
workspaces, im2col buffers) and anything allocated outside the mode. Storages of an op's inputs (in-place
ops, `out=`) are not new allocations and are not counted again.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass
class LivePeak:
    """The running total when it peaked, and the op whose outputs made it peak."""

    bytes: int = 0
    op: str = ""
    marks: tuple[str, ...] = ()  # the `mark()` labels active at the peak


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as lb: ...` then `lb.peak.bytes` (most bytes alive at once) and `lb.current`.

    Counts only storages created inside the block; `current` after the block is what is still alive
    (e.g. a cache the code kept). `mark(label)` tags the phase in progress, reported with the peak.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = LivePeak()
        self._live: dict[int, int] = {}
        self._marks: list[str] = []
        self.allocations = 0

    def mark(self, label: str) -> None:
        self._marks.append(label)

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now (like `torch.cuda.reset_peak_memory_stats`)."""
        self.peak = LivePeak(self.current, "", tuple(self._marks))

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in inputs or key in self._live:
                continue
            nbytes = storage.nbytes()
            self._live[key] = nbytes
            self.current += nbytes
            self.allocations += 1
            weakref.finalize(storage, self._free, key)
        if self.current > self.peak.bytes:
            self.peak = LivePeak(self.current, str(func), tuple(self._marks[-1:]))
        return out


@dataclass
class Counted:
    """Peak bytes above what was alive at the start, and what stayed alive, of one counted call."""

    peak_bytes: int
    retained_bytes: int
    peak_op: str
    details: dict = field(default_factory=dict)
