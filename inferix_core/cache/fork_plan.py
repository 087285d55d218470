"""N futures of one stream (branching): the pages a fork shares and the ones each future adds, and whether they
fit a budget (`plan_forks`)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch

from ..errors import CacheBudgetError, ConfigError
from ..memory import Fixed, MemoryPlan, PlanInput, compose
from .paged import planned_pages
from .plan_costs import activation_bytes, element_bytes, format_bytes, kv_spec, transformer_weight_bytes
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)


def fork_pages(config: KVCacheConfig, spec: KVCacheSpec, past_frames: int, future_frames: int) -> tuple[int, int]:
    """(pages the common past maps, most pages one future adds) for futures forked at `past_frames`.

    A future maps the past's pages (no copy) and allocates the pages its frames [past, past + future) write:
    the page the fork point falls inside is copied first (copy-on-write), the others are new. In a window a
    future never holds more live pages than the window needs (`planned_pages`), since its evicted own pages
    go back to the pool; the past's stay mapped while the parent lives. Exact for a global cache.
    """
    P = config.page_frames or spec.block_frames
    window = planned_pages(config, spec)
    shared = -(-past_frames // P)
    touched = len({f // P for f in range(past_frames, past_frames + future_frames)})
    if config.is_global:
        return shared, touched
    return min(shared, window), min(touched, window)


@dataclass
class ForkPlan:
    """What N futures forked from one stream need on the device, and the most futures that fit the budget.

    KV: the shared past's pages once + N × one future's own pages (`fork_pages`), at `page_bytes` each (all
    layers); working sets: the weights once, one batched block call of N streams' activations and N decoders.
    """

    num_futures: int
    shared_pages: int
    own_pages: int  # per future
    page_bytes: int
    weights_bytes: int
    activation_bytes: int  # one block call of the N futures batched
    decoder_bytes: int  # N decoders
    budget_bytes: int | None
    max_futures: int | None  # the most futures that fit the budget (None without a budget)
    message: str = ""

    @property
    def num_pages(self) -> int:
        return self.shared_pages + self.num_futures * self.own_pages

    @property
    def kv_bytes(self) -> int:
        return self.num_pages * self.page_bytes

    def composed(self) -> MemoryPlan:
        """The same rows through `memory.compose` (one option each: nothing gives way)."""
        given = PlanInput(0, 0, 1, None, streams=self.num_futures, shared_pages=self.shared_pages,
                          budget_bytes=self.budget_bytes)  # fmt: skip
        parts = [
            Fixed("transformer", self.weights_bytes, self.activation_bytes),
            Fixed("decoder", self.decoder_bytes),
            Fixed("kv cache", self.kv_bytes),
        ]
        return compose(given, parts)

    @property
    def total_bytes(self) -> int:
        return self.composed().peak_bytes

    @property
    def fits(self) -> bool:
        return self.composed().fits

    def check(self) -> ForkPlan:
        if not self.fits:
            raise CacheBudgetError(self.message)
        return self


def plan_forks(
    model_config,
    latent_h: int,
    latent_w: int,
    cache_config: KVCacheConfig,
    *,
    num_futures: int,
    past_frames: int,
    future_frames: int,
    dtype: torch.dtype = torch.bfloat16,
    block_frames: int = 3,
    budget_bytes: int | None = None,
    decoder_bytes: int = 0,
    shared_pages: int | None = None,
    resident_blocks: int | None = None,
) -> ForkPlan:
    """Plan `num_futures` futures of `future_frames` latent frames each, forked at `past_frames` (batched).

    Counts the shared past once and each future's new pages, activations of one block call of all futures
    as one batch, and `decoder_bytes` per future; allocates nothing. `shared_pages` is the parent's mapped
    page count when known (`len(stream.table)`). Over the budget, the message names the largest number of
    futures that fits (the cheapest fix) or, when not even one does, what one needs.
    """
    if num_futures < 1:
        raise ConfigError(f"plan at least one future, got {num_futures}")
    elem = element_bytes(dtype)
    total_frames = past_frames + future_frames
    one = kv_spec(model_config, latent_h, latent_w, block_frames, 1, dtype, total_frames)
    shared, own = fork_pages(cache_config, one, past_frames, future_frames)
    if shared_pages is not None:
        shared = shared_pages
    page = one.num_layers * one.page_size_bytes(page_frames=cache_config.page_frames or block_frames)
    weights = transformer_weight_bytes(model_config, elem, resident_blocks)

    def plan(n: int) -> ForkPlan:
        spec = dataclasses.replace(one, batch_size=n)
        acts = activation_bytes(model_config, spec, cache_config)
        return ForkPlan(n, shared, own, page, weights, acts, n * decoder_bytes, budget_bytes, None)

    out = plan(num_futures)
    if budget_bytes is None:
        return out
    fitting = [n for n in range(num_futures, 0, -1) if plan(n).fits]
    out.max_futures = fitting[0] if fitting else 0
    if not out.fits:
        need = (
            f"{num_futures} futures need {format_bytes(out.total_bytes)} (KV {out.num_pages} pages: {shared} shared + "
        )
        need += f"{num_futures} × {own} own; activations {format_bytes(out.activation_bytes)}, decoders "
        need += f"{format_bytes(out.decoder_bytes)}, weights {format_bytes(weights)}) but the budget is "
        need += f"{format_bytes(budget_bytes)}"
        if out.max_futures:
            out.message = f"{need}; at most {out.max_futures} futures fit: ask for {out.max_futures} or fewer"
        else:
            out.message = (
                f"{need}; not even one future fits ({format_bytes(plan(1).total_bytes)}): fewer future blocks, a "
                "shorter window or a smaller size"
            )
    return out
