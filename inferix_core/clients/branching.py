"""Branch a world: N futures from one stream state, sharing the common past's KV pages copy-on-write.

A fork maps the parent's pages (each page's reference count + 1, nothing copied); it gets its own
prompt, actions and seed; the forks then run together as one batch per block step
(`Engine.fork`, `Engine.step_many`: engine/forks.py), and memory grows only by their new blocks (a page a fork writes
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

Image-started and recompute models: a Wan 2.1 I2V fork keeps the start image's K/V (also under a new prompt)
and takes its cond_concat per block as its actions (`StartImageInputs.for_block`). Krea's KV recompute
rebuilds each block's cache from the stream's clean context latents, so there is no past to share: each fork
gets those latents, a fresh cache and (keep_first_frame=False) a fork of the pixel window and decoder cache the
first context frame is re-encoded from, and the forks run one after another (bitwise each run alone).
Matrix-Game's keyboard/mouse action caches are not in the arena: such a stream is refused, with the reason
(tests/test_branching_image_worlds.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..cache.paged import planned_pages
from ..cache.planner import ForkPlan, plan_forks
from ..cache.shared import PageArena, StreamKVCache
from ..cache.spec import KVCacheConfig
from ..engine import BlockInput, Engine, EngineBlock, Stream
from ..engine.conditioning import encode_prompt, latent_size
from ..engine.forks import Future, action_rows, check_branchable, check_forkable, fork_decoder
from ..engine.image_world import StartImageInputs, start_image_role
from ..engine.run_output import pixels_to_uint8
from ..errors import ConfigError
from ..models.registry import WorldModel
from ..pipeline import BlockDiffusionPipeline, SamplingConfig
from ..pipeline.block_diffusion import StreamState
from ..pipeline.streams import new_arena, release_stream, start_stream, stream_spec

log = logging.getLogger(__name__)

__all__ = [
    "BranchedVideo",
    "Branches",
    "Fork",
    "Future",
    "LiveBranch",
    "branch_video",
    "fork_decoder",
    "plan_futures",
    "release_stream",
    "start_stream",
]  # fmt: skip


@dataclass(eq=False)
class Fork:
    """One future as `Branches` runs it: the engine's stream of it and the blocks it made since the fork point."""

    future: Future
    stream: Stream
    origin_frame: int  # the fork point (absolute latent frame)
    blocks: list[torch.Tensor] = field(default_factory=list)  # the fork's clean latents (1, n, C, H, W) per block

    @property
    def state(self) -> StreamState:
        return self.stream.state

    @property
    def encoder(self) -> Any:
        """This fork's pixel window (Krea's keep_first_frame=False), else None."""
        return self.stream.pixel_window

    def actions(self, block_frames: int) -> torch.Tensor | None:
        """Rows counted from the fork point, or the future's function of the absolute frame."""
        who = f"fork '{self.future.name}'"
        return action_rows(self.future.actions, self.state.next_frame, block_frames, self.origin_frame, who)

    def latents(self) -> torch.Tensor:
        """This fork's generated latents (1, F, C, H, W) since the fork point."""
        return torch.cat(self.blocks, dim=1)


def plan_futures(
    pipe: BlockDiffusionPipeline,
    parent: StreamState,
    num_futures: int,
    future_blocks: int | None,
    *,
    budget_bytes: int | None = None,
    decoder_bytes: int = 0,
) -> ForkPlan:
    """The memory planner's count for `num_futures` futures of `parent` (`cache.planner.plan_forks`): the pages
    in use now once (the common past) + N × one future's new pages, N streams' activations and decoders.
    `future_blocks` may be None for a windowed cache (a future then holds at most a window of own pages)."""
    n = pipe.sampling.block_frames
    if future_blocks is None:
        if pipe.cache_config.is_global:
            raise ConfigError("planning futures of a global-attention stream needs future_blocks (their length)")
        future_blocks = -(-pipe.cache_config.window_frames // n) + 1
    used = parent.cache.arena.pool.num_used_pages if isinstance(parent.cache, StreamKVCache) else None
    return plan_forks(
        pipe.model.config, parent.latent_height, parent.latent_width, pipe.cache_config, num_futures=num_futures,
        past_frames=parent.next_frame, future_frames=future_blocks * n, dtype=pipe.dtype, block_frames=n,
        budget_bytes=budget_bytes, decoder_bytes=decoder_bytes, shared_pages=used,
    )  # fmt: skip


class Branches:
    """N forks of one stream state, stepped as one batch by the engine (`Engine.fork`, `Engine.step_many`); see
    the module docstring.

    With `budget_bytes`, the memory planner admits the N futures first (`plan_futures`: the shared past once
    + N × their new pages and working sets) and refuses, naming the largest N that fits, before anything is
    forked or allocated; the arena is then grown once to the planned pages, so no future grows it mid-run.
    `engine`: the engine of `pipe` to step them with (default: one over `pipe`, latents only); `decoder`: the
    parent's stream decoder, forked for each future (its frames in `EngineBlock.frames`).
    """

    def __init__(
        self,
        pipe: BlockDiffusionPipeline,
        parent: StreamState,
        futures: list[Future],
        *,
        budget_bytes: int | None = None,
        future_blocks: int | None = None,
        decoder_bytes: int = 0,
        engine: Engine | None = None,
        decoder: Any = None,
    ):
        check_forkable(pipe, parent)
        if not futures:
            raise ConfigError("branching needs at least one Future")
        self.recompute = bool(pipe.sampling.kv_recompute_frames)  # Krea: per-fork caches, run one after another
        self.pipe, self.parent = pipe, parent
        self.engine = engine if engine is not None else Engine(pipeline=pipe)
        self.plan: ForkPlan | None = None
        if budget_bytes is not None and not self.recompute:
            self.plan = plan_futures(pipe, parent, len(futures), future_blocks, budget_bytes=budget_bytes,
                                     decoder_bytes=decoder_bytes).check()  # fmt: skip
            parent.cache.arena.grow(self.plan.num_pages)
        for i, fut in enumerate(futures):
            fut.name = fut.name or f"future {i}"
        streams = self.engine.fork(Stream(parent, decoder), futures)
        self.forks = [Fork(fut, st, parent.next_frame) for fut, st in zip(futures, streams, strict=True)]
        shared = "none (KV recompute)" if self.recompute else len(parent.cache.table)
        log.info("branched %d futures at frame %d: pages shared %s", len(futures), parent.next_frame, shared)

    @property
    def arena(self) -> PageArena:
        return self.parent.cache.arena

    @property
    def states(self) -> list[StreamState]:
        return [f.state for f in self.forks]

    def step(self) -> list[EngineBlock]:
        """The next block of every live fork, as one batch per transformer call (Krea: one after another)."""
        if not self.forks:
            raise ConfigError("no forks left to step (all were dropped)")
        n = self.pipe.sampling.block_frames
        blocks = [BlockInput(action=f.actions(n)) for f in self.forks]
        made = self.engine.step_many([f.stream for f in self.forks], blocks)
        for fork, block in zip(self.forks, made, strict=True):
            fork.blocks.append(block.latents)
        return made

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
        if len(kept) > 1 and kept[0].encoder is not None:
            raise ConfigError(
                "the pipeline re-encodes from one pixel window (Krea's keep_first_frame=False); keep one fork"
            )
        for fork in self.forks:
            if fork not in kept:
                self.engine.release(fork.stream)
        self.forks = kept
        if kept and kept[0].encoder is not None:  # the kept fork goes on through pipe.denoise_block: its window
            self.pipe.first_frame_encoder = kept[0].encoder
        return [f.state for f in kept]

    def drop(self, index: int) -> None:
        """Release one fork's pages; the others go on."""
        self.keep(*[i for i in range(len(self.forks)) if i != index])

    def stats(self) -> dict:
        if self.recompute:  # nothing shared: each fork rebuilds its cache from its own context latents
            return {"forks": len(self.forks), "fork_frame": self.forks[0].origin_frame if self.forks else None,
                    "own_pages": [], "kv_recompute": True}  # fmt: skip
        arena = self.arena.stats()
        return {
            "forks": len(self.forks),
            "fork_frame": self.forks[0].origin_frame if self.forks else None,
            "own_pages": [len(f.state.cache.own_pages()) for f in self.forks],
            **arena,
        }


@dataclass
class BranchedVideo:
    """A common past and N futures: latents (1, F, C, h, w) and, when decoded, uint8 frames [T, H, W, 3]."""

    past_latents: torch.Tensor
    future_latents: list[torch.Tensor]
    past_frames: np.ndarray | None
    future_frames: list[np.ndarray] | None
    fps: float
    stats: dict

    def side_by_side(self) -> np.ndarray:
        """The futures' frames next to each other, left to right: [T, H, N·W, 3]."""
        if self.future_frames is None:
            raise ConfigError("this branched video was not decoded (decode=False)")
        return np.concatenate(self.future_frames, axis=2)

    def chosen(self, index: int) -> np.ndarray:
        """Past + future `index` as one video [T, H, W, 3] (the future that was kept)."""
        if self.future_frames is None:
            raise ConfigError("this branched video was not decoded (decode=False)")
        if not 0 <= index < len(self.future_frames):
            raise ConfigError(f"future {index} does not exist; there are {len(self.future_frames)} (0-based)")
        return np.concatenate([self.past_frames, self.future_frames[index]])


def branch_video(
    world_model: WorldModel,
    prompt: str | torch.Tensor,
    futures: Sequence[str | torch.Tensor | None],
    *,
    past_blocks: int,
    future_blocks: int,
    width: int,
    height: int,
    seed: int = 0,
    future_seeds: Sequence[int | None] | None = None,
    cache: KVCacheConfig | None = None,
    sampling: SamplingConfig | None = None,
    decode: bool = True,
    start_image: Any = None,
    clip_vision: Any = None,
    budget_bytes: int | None = None,
) -> BranchedVideo:
    """Generate `past_blocks` under `prompt`, fork one future per entry of `futures` (a prompt, or None to
    keep `prompt`) and run them batched for `future_blocks` blocks; decode the past once and each future
    from the past's decoder state. `future_seeds[i]` None continues the past's noise; default seed + 1 + i.

    A Wan 2.1 I2V model takes `start_image` and `clip_vision` (every future keeps the image); Krea's KV
    recompute runs its futures one after another, each with its own context latents and pixel window.
    With `budget_bytes` the planner admits the futures before anything runs (`cache.planner.plan_forks`):
    too many are refused naming the largest number that fits; the arena is sized to the plan.
    """
    role = start_image_role(world_model, start_image)
    if role == "ti2v":
        raise ConfigError(
            "branch_video starts no TI2V model from an image yet; generate the first block with generate_video "
            "(keep_world_state=True) and branch its world in an InteractiveSession"
        )
    if role == "image_world":
        raise ConfigError(
            "a Matrix-Game world cannot branch yet: its keyboard/mouse action caches are not pages of the arena (no "
            "copy-on-write) and each future needs its own action track; save the world and resume it once per future"
        )
    if not futures:
        raise ConfigError("give at least one future (a prompt, or None to keep the past's)")
    if past_blocks < 1 or future_blocks < 1:
        raise ConfigError(f"past_blocks and future_blocks must be >= 1, got {past_blocks} and {future_blocks}")
    seeds = list(future_seeds) if future_seeds is not None else [seed + 1 + i for i in range(len(futures))]
    if len(seeds) != len(futures):
        raise ConfigError(f"{len(seeds)} future seeds for {len(futures)} futures")
    sampling = sampling or world_model.sampling
    cache = cache or world_model.default_cache
    lat_h, lat_w = latent_size(world_model, width, height)
    n = sampling.block_frames
    plan = None
    if not sampling.kv_recompute_frames:  # before anything is encoded or allocated: do the N futures fit?
        plan = plan_forks(
            world_model.config, lat_h, lat_w, cache, num_futures=len(futures), past_frames=past_blocks * n,
            future_frames=future_blocks * n, dtype=world_model.dtype, block_frames=n, budget_bytes=budget_bytes,
        ).check()  # fmt: skip
    reencodes = bool(sampling.kv_recompute_frames) and not sampling.keep_first_frame
    engine = Engine(world_model, sampling, cache, decode=False)  # with Krea's pixel window when it re-encodes
    pipe = engine.pipeline
    image = (
        StartImageInputs(world_model, start_image, width, height, clip_vision) if role == "prompt_and_image" else None
    )
    per_block = None if image is None else image.for_block  # Wan 2.1 I2V: cond_concat of each block's frames
    context = encode_prompt(world_model, prompt)
    arena = None  # Krea: the cache is rebuilt every block, a plain stream
    if not sampling.kv_recompute_frames:
        alone = planned_pages(cache, dataclasses.replace(stream_spec(pipe, lat_h, lat_w), max_frames=past_blocks * n))
        arena = new_arena(pipe, lat_h, lat_w, num_pages=max(plan.num_pages, alone))
    stream = engine.open(context, lat_h, lat_w, seed=seed, arena=arena, keep_history=False,
                         image_context=None if image is None else image.visual_context)  # fmt: skip
    past = torch.cat(
        [engine.step(stream, BlockInput(action=None if per_block is None else per_block(b * n, n))).latents
         for b in range(past_blocks)], dim=1,
    )  # fmt: skip
    parent = stream.state
    contexts = [None if f is None else encode_prompt(world_model, f) for f in futures]
    branches = Branches(pipe, parent, [Future(context=c, seed=s, actions=per_block)
                                       for c, s in zip(contexts, seeds, strict=True)], engine=engine)  # fmt: skip
    latents = branches.run(future_blocks)
    stats = branches.stats()
    branches.keep()
    release_stream(parent)
    past_frames = future_frames = None
    if decode:
        if world_model.vae is None:
            raise ConfigError("decode=True needs a VAE: pick a VAE file in Load World Model, or set decode=False")
        decoder = world_model.vae.stream_decoder(**({"krea_decoder": True} if reencodes else {}))  # as the loop decodes
        past_frames = pixels_to_uint8(decoder.decode(past.permute(0, 2, 1, 3, 4)))
        future_frames = []
        for lat in latents:
            d = fork_decoder(decoder)  # the same VAE, the past's causal caches forked
            future_frames.append(pixels_to_uint8(d.decode(lat.permute(0, 2, 1, 3, 4))))
    return BranchedVideo(past, latents, past_frames, future_frames, world_model.fps, stats)


class LiveBranch:
    """Futures of a running stream for an interactive session: stepped batched, each decoded with a fork of
    the stream's decoder, their frames kept until one is picked (`InteractiveSession`'s "branch here")."""

    def __init__(self, pipe: BlockDiffusionPipeline, state: StreamState, futures: list[Future], decoder=None):
        self.pipe = pipe
        check_branchable(pipe)
        self.engine = Engine(pipeline=pipe)  # latents only: each future decodes with a fork of `decoder`
        self.parent = self.engine.adopt(Stream(state, decoder)).state  # a plain cache is copied into an arena once
        self._adopted = self.parent is not state  # then the caller's state still holds its own cache
        self.branches = Branches(pipe, self.parent, futures, engine=self.engine, decoder=decoder)
        self.decodes = decoder is not None
        self.frames: list[list[tuple[int, np.ndarray]]] = [[] for _ in futures]  # (block index, frames) per fork

    @property
    def num_futures(self) -> int:
        return len(self.branches.forks)

    def step(self) -> tuple[list[EngineBlock], list[np.ndarray] | None]:
        """One block of every future; their decoded frames (None without a decoder)."""
        made = self.branches.step()
        if not self.decodes:
            return made, None
        for kept, block in zip(self.frames, made, strict=True):
            kept.append((block.index, block.frames))
        return made, [block.frames for block in made]

    def pick(self, index: int):
        """Keep future `index`: (its StreamState, its decoder or None, its Fork with the blocks it generated,
        its decoded (block index, frames) so far); every other page is released."""
        if not 0 <= index < self.num_futures:
            raise ConfigError(f"future {index} does not exist; there are {self.num_futures} (0-based)")
        fork = self.branches.forks[index]
        (state,) = self.branches.keep(index)
        release_stream(self.parent)
        return state, fork.stream.decoder, fork, self.frames[index]

    def drop(self) -> None:
        """Keep none of the futures (the parent stream goes on with the state it had)."""
        self.branches.keep()
        if self._adopted:
            release_stream(self.parent)
