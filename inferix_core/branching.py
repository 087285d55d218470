"""Branch a world: N futures from one stream state, sharing the common past's KV pages copy-on-write.

A fork maps the parent's pages (each page's reference count + 1, nothing copied); it gets its own
prompt, actions and seed; the forks then run together as one batch per block step
(`pipeline.batched.denoise_streams`), and memory grows only by their new blocks (a page a fork writes
into while another stream still maps it is copied first). Keep one, several or none: `keep()` releases
the others, whose pages go back to the arena's pool.

    state = start_stream(pipe, prompt, h, w, seed=0)        # a stream whose pages live in a PageArena
    for _ in range(4):
        pipe.denoise_block(state)                           # the common past, as any stream
    branches = Branches(pipe, state, [Future(seed=1), Future(context=other_prompt, seed=2)])
    for _ in range(3):
        outs = branches.step()                              # one BlockOutput per fork, batched
    (chosen,) = branches.keep(1)                            # a StreamState that goes on as any stream

Each fork equals the same run done alone (a stream continued from the parent with the fork's prompt,
actions and seed) to within the batch's matmul rounding (tests/test_branching.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .cache.paged import planned_pages
from .cache.shared import PageArena, StreamKVCache
from .cache.spec import KVCacheSpec
from .errors import ConfigError, ShapeMismatchError
from .parallel import head_shards
from .pipeline import BlockDiffusionPipeline, BlockOutput, SeededNoise
from .pipeline.batched import denoise_streams
from .pipeline.block_diffusion import StreamState
from .tensors import to_device_async

log = logging.getLogger(__name__)

Actions = torch.Tensor | Callable[[int, int], torch.Tensor] | None


def stream_spec(pipe: BlockDiffusionPipeline, latent_height: int, latent_width: int) -> KVCacheSpec:
    """The KV spec of one batch-1 stream of `pipe` at this latent size (what a PageArena is built for)."""
    cfg = pipe.model.config
    return KVCacheSpec(
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads // head_shards(pipe.model),
        head_dim=cfg.head_dim,
        frame_tokens=cfg.frame_tokens(latent_height, latent_width),
        block_frames=pipe.sampling.block_frames,
        batch_size=1,
        dtype=pipe.dtype,
        device=pipe.device,
    )


def new_arena(
    pipe: BlockDiffusionPipeline,
    latent_height: int,
    latent_width: int,
    num_pages: int | None = None,
    *,
    streams: int = 1,
    max_frames: int | None = None,
) -> PageArena:
    """An empty PageArena for `pipe`'s cache settings at this latent size; it grows (logged) as streams need.

    Sized `num_pages`, or else for `streams` streams of `max_frames` latent frames each (a global cache's
    run length; a window needs none), so a known workload never grows the buffers mid-run.
    """
    spec = stream_spec(pipe, latent_height, latent_width)
    if num_pages is None:
        num_pages = streams * planned_pages(pipe.cache_config, dataclasses.replace(spec, max_frames=max_frames))
    return PageArena(pipe.cache_config, spec, num_pages)


def start_stream(
    pipe: BlockDiffusionPipeline,
    context: torch.Tensor,
    latent_height: int,
    latent_width: int,
    *,
    seed: int = 0,
    arena: PageArena | None = None,
    noise=None,
) -> StreamState:
    """A fresh batch-1 stream whose pages live in `arena` (a new one when None): forkable and batchable.

    It runs through `pipe.denoise_block` like any stream, continuing exactly as a paged-cache stream
    of the same settings would.
    """
    if context.shape[0] != 1:
        raise ShapeMismatchError(f"a stream takes one prompt (1, L, D); got {tuple(context.shape)}")
    if arena is None:
        arena = new_arena(pipe, latent_height, latent_width)
    elif arena.spec != stream_spec(pipe, latent_height, latent_width):
        raise ConfigError(
            "this page arena was built for another model or latent size; a stream at "
            f"{latent_height}×{latent_width} latents needs its own arena"
        )
    text = pipe.model.prepare_context(to_device_async(context, pipe.device))
    noise = noise if noise is not None else SeededNoise(seed)
    return StreamState(arena.new_stream(), text, noise, latent_height, latent_width, 1)


def adopt_stream(pipe: BlockDiffusionPipeline, state: StreamState, arena: PageArena | None = None) -> StreamState:
    """The same stream with its KV cache moved into a page arena (copied once), so it can branch or batch.

    For a stream from `pipe.start_stream` or `load_world_state` (a ring or paged cache); the state's
    prompt K/V, noise and position are kept. A stream already in an arena is returned as is.
    """
    if isinstance(state.cache, StreamKVCache):
        return state
    if state.batch_size != 1:
        raise ConfigError(f"only a batch-1 stream can be branched; this one has batch {state.batch_size}")
    if state.first_latent is not None or state.clean_prefix is not None:
        raise ConfigError("a stream with KV recompute or clean first latents cannot be moved into a page arena yet")
    arena = arena or new_arena(pipe, state.latent_height, state.latent_width)
    cache = arena.adopt(state.cache)
    return StreamState(cache, state.text, state.noise, state.latent_height, state.latent_width, 1,
                       state.next_frame, state.next_block)  # fmt: skip


def clone_noise(noise) -> SeededNoise:
    """A copy of a SeededNoise that draws what the original would draw next (a fork that keeps the seed)."""
    if not isinstance(noise, SeededNoise):
        raise ConfigError(f"a fork without its own seed copies the parent's SeededNoise, not {type(noise).__name__}")
    out = SeededNoise(0, device=noise.device)
    out.generator.set_state(noise.generator.get_state())
    out._upfront = noise._upfront
    return out


@dataclass(eq=False)
class Future:
    """What one fork does differently from its parent, from the fork point on.

    context: a prompt embedding (1, L, text_dim); None keeps the parent's prompt.
    actions: rows (1, F, A) counted from the fork's first frame, or fn(start_frame, num_frames) → (1, n, A)
        with absolute frames; None for models without actions.
    seed: the fork's own noise seed; None continues the parent's noise stream (a copy of its generator).
    name: a label for logs and the live view.
    """

    context: torch.Tensor | None = None
    actions: Actions = None
    seed: int | None = None
    name: str = ""


@dataclass(eq=False)
class Fork:
    future: Future
    state: StreamState
    origin_frame: int  # the fork point (absolute latent frame)
    blocks: list[torch.Tensor] = field(default_factory=list)  # the fork's clean latents (1, n, C, H, W) per block

    def actions(self, block_frames: int) -> torch.Tensor | None:
        a, start = self.future.actions, self.state.next_frame
        if a is None:
            return None
        if callable(a):
            return a(start, block_frames)
        rel = start - self.origin_frame
        rows = a[:, rel : rel + block_frames]
        if rows.shape[1] != block_frames:
            raise ShapeMismatchError(
                f"fork '{self.future.name}' has actions for {a.shape[1]} frames from the fork point; "
                f"block at frame {start} needs rows {rel}..{rel + block_frames - 1}"
            )
        return rows

    def latents(self) -> torch.Tensor:
        """This fork's generated latents (1, F, C, H, W) since the fork point."""
        return torch.cat(self.blocks, dim=1)


class Branches:
    """N forks of one stream state, stepped as one batch; see the module docstring."""

    def __init__(self, pipe: BlockDiffusionPipeline, parent: StreamState, futures: list[Future]):
        if not isinstance(parent.cache, StreamKVCache):
            raise ConfigError(
                f"branching needs a stream whose pages live in a page arena, not a {type(parent.cache).__name__}; "
                "start it with inferix_core.branching.start_stream"
            )
        if not futures:
            raise ConfigError("branching needs at least one Future")
        self.pipe, self.parent = pipe, parent
        self.forks: list[Fork] = []
        for i, fut in enumerate(futures):
            text = parent.text
            if fut.context is not None:
                text = pipe.model.prepare_context(to_device_async(fut.context, pipe.device))
            noise = clone_noise(parent.noise) if fut.seed is None else SeededNoise(fut.seed)
            state = StreamState(
                parent.cache.fork(), text, noise, parent.latent_height, parent.latent_width, 1,
                parent.next_frame, parent.next_block,
            )  # fmt: skip
            fut.name = fut.name or f"future {i}"
            self.forks.append(Fork(fut, state, parent.next_frame))
        log.info(
            "branched %d futures at frame %d: %d pages shared", len(futures), parent.next_frame, len(parent.cache.table)
        )

    @property
    def arena(self) -> PageArena:
        return self.parent.cache.arena

    @property
    def states(self) -> list[StreamState]:
        return [f.state for f in self.forks]

    def step(self) -> list[BlockOutput]:
        """The next block of every live fork, as one batch per transformer call."""
        if not self.forks:
            raise ConfigError("no forks left to step (all were dropped)")
        n = self.pipe.sampling.block_frames
        outs = denoise_streams(self.pipe, self.states, [f.actions(n) for f in self.forks])
        for fork, out in zip(self.forks, outs, strict=True):
            fork.blocks.append(out.latents)
        return outs

    def run(self, num_blocks: int) -> list[torch.Tensor]:
        """Step `num_blocks` blocks; each fork's latents since the fork point (1, F, C, H, W)."""
        for _ in range(num_blocks):
            self.step()
        return [f.latents() for f in self.forks]

    def keep(self, *indices: int) -> list[StreamState]:
        """Keep the forks at `indices` (none: drop all); the others' pages are released. Returns the kept states."""
        bad = [i for i in indices if not 0 <= i < len(self.forks)]
        if bad:
            raise ConfigError(f"fork index {bad[0]} does not exist; there are {len(self.forks)} forks")
        kept = [self.forks[i] for i in sorted(set(indices))]
        for fork in self.forks:
            if fork not in kept:
                fork.state.cache.release()
        self.forks = kept
        return [f.state for f in kept]

    def drop(self, index: int) -> None:
        """Release one fork's pages; the others go on."""
        self.keep(*[i for i in range(len(self.forks)) if i != index])

    def stats(self) -> dict:
        arena = self.arena.stats()
        return {
            "forks": len(self.forks),
            "fork_frame": self.forks[0].origin_frame if self.forks else None,
            "own_pages": [len(f.state.cache.own_pages()) for f in self.forks],
            **arena,
        }


def release_stream(state: StreamState) -> None:
    """Drop a stream's page references (e.g. the parent once its forks are what goes on)."""
    if isinstance(state.cache, StreamKVCache):
        state.cache.release()
