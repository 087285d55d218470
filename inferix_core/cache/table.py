"""BlockTable: logical page → physical page for one stream, as a host mirror plus device index tensors.

As vLLM's `vllm/v1/worker/block_table.py`: rows change on the host (plain Python / numpy) and reach the
GPU once per block through `DeviceIndex.load` (a non-blocking copy from pinned memory into a buffer
allocated once). The model's forward therefore never reads an index back from the GPU (no `.item()`),
and the index tensors keep their storage, which is what a CUDA graph needs. The table does not know
about tensors of K/V; the store turns its slot numbers into reads and writes.
"""

from __future__ import annotations

import numpy as np
import torch

_INDEX_DTYPE = torch.int64


class DeviceIndex:
    """A device int64 index buffer, refilled from the host at most once per block.

    `load(values)` copies into a preallocated buffer and returns a view of its first len(values)
    entries. On CUDA the source is pinned, so the copy is asynchronous and triggers no host sync; the
    caching host allocator keeps the pinned block alive until the copy has run. The buffer only grows
    (with a new allocation) when a longer index is needed, e.g. while a window is still filling.
    """

    def __init__(self, device: torch.device | str, capacity: int = 0):
        self.device = torch.device(device)
        self._buf = torch.empty(max(capacity, 1), dtype=_INDEX_DTYPE, device=self.device)
        self._key: bytes | None = None
        self._view = self._buf[:0]

    def load(self, values: np.ndarray) -> torch.Tensor:
        key = values.tobytes()
        if key == self._key:  # repeated call of the same block: nothing to copy
            return self._view
        n = int(values.shape[0])
        if n > self._buf.numel():
            self._buf = torch.empty(n, dtype=_INDEX_DTYPE, device=self.device)
        host = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
        if self.device.type == "cuda":
            self._buf[:n].copy_(host.pin_memory(), non_blocking=True)
        else:
            self._buf[:n].copy_(host)
        self._key = key
        self._view = self._buf[:n]
        return self._view


class BlockTable:
    """Live logical pages of one stream and the slot arithmetic on them.

    Frames are stored in pages of `page_frames` whole latent frames::

        frame f  →  logical page lp = f // P,  offset o = f % P
        lp       →  physical page id p           (this table; ids come from the BlockPool)
        frame slot  = p·P + o                    (index of the frame in the store)
        token slots = frame slot·T + [0, T)      (T = frame_tokens)

        e.g. P = 3, T = 24, table {0: 4, 2: 1}: frame 7 → lp 2, o 1 → frame slot 4, tokens 96..119

    Only live pages are in the table (a dict, insertion-ordered); evicting a page removes its row, so
    the table stays as small as the window however long the stream runs.
    """

    def __init__(self, page_frames: int, frame_tokens: int):
        self.page_frames = page_frames
        self.frame_tokens = frame_tokens
        self.pages: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.pages)

    def __contains__(self, logical_page: int) -> bool:
        return logical_page in self.pages

    def logical_page(self, frame: int) -> int:
        return frame // self.page_frames

    def add(self, logical_page: int, page_id: int) -> None:
        if logical_page in self.pages:
            raise RuntimeError(f"logical page {logical_page} is already mapped to page {self.pages[logical_page]}")
        self.pages[logical_page] = page_id

    def remove(self, logical_page: int) -> int:
        return self.pages.pop(logical_page)

    def frame_slot(self, frame: int) -> int:
        return self.pages[frame // self.page_frames] * self.page_frames + frame % self.page_frames

    def frame_slots(self, frames: list[int] | range) -> np.ndarray:
        return np.fromiter((self.frame_slot(f) for f in frames), dtype=np.int64, count=len(frames))

    def token_slots(self, frames: list[int] | range) -> np.ndarray:
        """Token slots of `frames`, in the given frame order: (len(frames)·T,) int64."""
        return token_slots(self.frame_slots(frames), self.frame_tokens)

    def clear(self) -> None:
        self.pages.clear()


def token_slots(frame_slots: np.ndarray, frame_tokens: int) -> np.ndarray:
    """Expand frame slots to their tokens: [s0, s1] → [s0·T .. s0·T+T−1, s1·T .. s1·T+T−1]."""
    base = frame_slots.astype(np.int64)[:, None] * frame_tokens
    return (base + np.arange(frame_tokens, dtype=np.int64)[None, :]).reshape(-1)


def contiguous_runs(dst: np.ndarray) -> list[tuple[int, int, int]]:
    """Split a token-slot list into (dst_start, src_start, length) runs of consecutive slots.

    Used for copies that cannot take an index tensor (pinned host stores written from the GPU):
    slots [5, 6, 7, 20, 21] → [(5, 0, 3), (20, 3, 2)].
    """
    runs: list[tuple[int, int, int]] = []
    if dst.size == 0:
        return runs
    breaks = np.flatnonzero(np.diff(dst) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [dst.size]])
    for s, e in zip(starts.tolist(), ends.tolist()):
        runs.append((int(dst[s]), s, e - s))
    return runs


_WORD = torch.int64


def _as_words(t: torch.Tensor) -> torch.Tensor | None:
    """(B, L, H, D) viewed as (B, L, H·D·itemsize/8) int64 words, or None when its memory does not allow it."""
    if t.dim() != 4 or not t.is_contiguous():
        return None
    if (t.shape[2] * t.shape[3] * t.element_size()) % 8 or (t.storage_offset() * t.element_size()) % 8:
        return None
    return t.flatten(2).view(_WORD)


def copy_token_rows(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
    """dst[:, index] = src for (B, L, H, D) K/V buffers: every token's H·D values moved as 8-byte words.

    `index_copy_` moves one element per step: on bf16 that is 2 bytes, and the KV writes ran at about
    0.6 TB/s on the H200 (issue #19's kernel profile). The same bytes as int64 words are the same copy, bit
    for bit; layouts that cannot be viewed so (a strided K, an odd row size) take the element copy.
    """
    src = src.to(dst.dtype)
    words_dst, words_src = _as_words(dst), _as_words(src)
    if words_dst is None or words_src is None:
        dst.index_copy_(1, index, src)
    else:
        words_dst.index_copy_(1, index, words_src)
