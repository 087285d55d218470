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
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass
class LivePeak:
    """The running total when it peaked, and the op whose outputs made it peak."""

    bytes: int = 0
    op: str = ""
    marks: tuple[str, ...] = ()  # the last `mark()` label before the peak (the phase it was in)
    live: tuple[tuple[str, tuple[int, ...], int], ...] = ()  # with `detail`: (op, shape, bytes) of each live storage


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as lb: ...` then `lb.peak.bytes` (most bytes alive at once) and `lb.current`.

    Counts only storages created inside the block; `current` after the block is what is still alive
    (e.g. a cache the code kept). `mark(label)` tags the phase in progress, reported with the peak.
    """

    def __init__(self, detail: bool = False) -> None:
        super().__init__()
        self.detail = detail  # keep what was alive at the peak (slower: a copy per new peak)
        self._what: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.current = 0
        self.peak = LivePeak()
        self._live: dict[int, int] = {}
        self._marks: list[str] = []
        self.allocations = 0

    def mark(self, label: str) -> None:
        self._marks.append(label)

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now (like `torch.cuda.reset_peak_memory_stats`)."""
        self.peak = LivePeak(self.current, "", tuple(self._marks[-1:]))

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)
        self._what.pop(key, None)

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
            if self.detail:
                self._what[key] = (str(func), tuple(t.shape))
            weakref.finalize(storage, self._free, key)
        if self.current > self.peak.bytes:
            live = tuple((*self._what[k], n) for k, n in self._live.items() if k in self._what) if self.detail else ()
            self.peak = LivePeak(self.current, str(func), tuple(self._marks[-1:]), live)
        return out
