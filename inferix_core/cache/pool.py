"""BlockPool: which KV pages exist, which are free, and who holds them. Host only, never a tensor.

As vLLM's `vllm/v1/core/block_pool.py`: the pool hands out page ids, counts references and keeps a free
list; the tensors a page id indexes belong to the store (`paged.py`, `offload.py`, `quant.py`). Keeping
ids apart from storage is what lets eviction, offload and quantization act on pages without copies here.
It deliberately has no null page: our tables hold only live pages (see `table.py`), so nothing needs a
placeholder, and no prefix caching: a world-model stream never shares a prefix between requests.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from ..errors import CacheBudgetError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class KVPage:
    """One page of whole latent frames (K and V of every layer share the id)."""

    page_id: int
    ref_cnt: int = 0


class BlockPool:
    """Page ids 0 .. num_pages−1, reference counts and a FIFO free list.

    Invariants: a page is in the free list iff its ref_cnt is 0; allocate() never returns a page twice
    before it is freed. A deque is enough for the free list (vLLM hand-builds a linked list for O(1)
    removal from the middle, which prefix-cache hits need; we never take a page out of the middle).
    FIFO order means a freed page is reused last, which spreads writes over the pool and makes
    use-after-free bugs show up in tests as wrong values rather than silently right ones.
    """

    def __init__(self, num_pages: int):
        if num_pages < 1:
            raise CacheBudgetError(f"a KV page pool needs at least 1 page, got {num_pages}")
        self.pages = [KVPage(i) for i in range(num_pages)]
        self._free: deque[int] = deque(range(num_pages))
        self.num_allocations = 0
        self.num_frees = 0
        self.peak_used = 0

    @property
    def num_pages(self) -> int:
        return len(self.pages)

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_used_pages(self) -> int:
        return self.num_pages - self.num_free_pages

    def usage(self) -> float:
        """Fraction of pages in use (0..1), as vLLM's `KVCacheManager.usage`."""
        return self.num_used_pages / self.num_pages

    def allocate(self, count: int) -> list[int] | None:
        """Take `count` free pages (ref_cnt 1 each), or None when too few are free: the caller decides."""
        if count > len(self._free):
            return None
        ids = [self._free.popleft() for _ in range(count)]
        for i in ids:
            self.pages[i].ref_cnt = 1
        self.num_allocations += count
        self.peak_used = max(self.peak_used, self.num_used_pages)
        return ids

    def incref(self, ids: list[int]) -> None:
        """Share pages (a second table pointing at the same frames, e.g. a forked stream)."""
        for i in ids:
            if self.pages[i].ref_cnt == 0:
                raise RuntimeError(f"page {i} is free; cannot share it")
            self.pages[i].ref_cnt += 1

    def free(self, ids: list[int]) -> None:
        """Drop one reference of each page; pages reaching 0 go to the back of the free list."""
        for i in ids:
            page = self.pages[i]
            if page.ref_cnt <= 0:
                raise RuntimeError(f"page {i} freed twice")
            page.ref_cnt -= 1
            if page.ref_cnt == 0:
                self._free.append(i)
                self.num_frees += 1

    def grow(self, extra: int) -> list[int]:
        """Add `extra` pages (global attention outgrowing its planned length); returns the new ids."""
        start = self.num_pages
        new = [KVPage(i) for i in range(start, start + extra)]
        self.pages.extend(new)
        self._free.extend(p.page_id for p in new)
        log.info("KV page pool grows from %d to %d pages", start, self.num_pages)
        return [p.page_id for p in new]

    def state_dict(self) -> dict:
        return {
            "num_pages": self.num_pages,
            "ref_counts": [p.ref_cnt for p in self.pages],
            "free": list(self._free),
            "pool_counters": [self.num_allocations, self.num_frees, self.peak_used],
        }

    def load_state_dict(self, meta: dict) -> None:
        """A saved pool into this one (equal or larger): pages beyond the saved ones stay free."""
        refs = meta["ref_counts"]
        for page in self.pages:
            page.ref_cnt = refs[page.page_id] if page.page_id < len(refs) else 0
        self._free = deque(meta["free"] + list(range(len(refs), self.num_pages)))
        self.num_allocations, self.num_frees, self.peak_used = meta["pool_counters"]

    def reset(self) -> None:
        """Free everything (between runs); the storage behind the ids is kept by the store."""
        for p in self.pages:
            p.ref_cnt = 0
        self._free = deque(range(self.num_pages))
        self.num_allocations = self.num_frees = self.peak_used = 0
