"""Branching a world (issue #22): forks share the common past's pages copy-on-write and run as one batch.

CPU, fp32, a tiny random Wan. Checked: a stream in a page arena equals a plain paged run bitwise; each
fork equals the same run done alone (parent continued with the fork's prompt, actions and seed); forks
map the parent's pages (reference counts) and add only their new blocks; dropping forks frees their
pages; without copy-on-write the forks overwrite each other's past (the test that the copy matters).
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig, PagedKVCache
from inferix_core.cache.shared import StreamKVCache
from inferix_core.clients.branching import Branches, Future, release_stream, start_stream
from inferix_core.errors import ConfigError
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig, SeededNoise
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2, action_dim=3)
H, W = 4, 6
N = 3  # block frames (SamplingConfig default)
CACHES = {
    # 6-frame pages, 3-frame blocks: a fork after an odd number of blocks writes into a shared page (COW)
    "global_page6": KVCacheConfig(page_frames=6),
    "window_sink_page3": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3),
}


def _pipe(cache):
    model = CausalWanTransformer(CFG)
    model.load_state_dict(random_wan_state_dict(CFG, seed=0))
    return BlockDiffusionPipeline(model.eval(), SamplingConfig(), cache)


def _inputs():
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randn(1, 4, 8, generator=g) for _ in range(4)]
    actions = [torch.randn(1, 8 * N, 3, generator=g) for _ in range(4)]
    return prompts, actions


def _past(pipe, state, actions, blocks):
    return [pipe.denoise_block(state, actions[:, N * b : N * (b + 1)]).latents for b in range(blocks)]


def _alone(pipe, prompts, actions, past, fut, fut_actions, fut_blocks):
    """The fork's future run alone: a plain paged stream, the past, then the fork's prompt/seed/actions."""
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    assert isinstance(state.cache, PagedKVCache) and not isinstance(state.cache, StreamKVCache)
    _past(pipe, state, actions[0], past)
    if fut.context is not None:
        pipe.set_prompt(state, fut.context)
    if fut.seed is not None:
        state.noise = SeededNoise(fut.seed)
    return torch.cat(
        [pipe.denoise_block(state, fut_actions[:, N * b : N * (b + 1)]).latents for b in range(fut_blocks)], dim=1
    )


def _futures(prompts, actions):
    return [
        Future(context=prompts[1], actions=actions[1], seed=11),
        Future(context=prompts[2], actions=actions[2], seed=12),
        Future(context=None, actions=actions[3], seed=None),  # keeps the parent's prompt and noise stream
    ]


def test_arena_stream_equals_plain_paged_run_bitwise():
    pipe, (prompts, actions) = _pipe(CACHES["window_sink_page3"]), _inputs()
    plain = pipe.start_stream(prompts[0], H, W, seed=5)
    a = _past(pipe, plain, actions[0], 5)  # 15 frames: the window slides, pages recycle
    shared = start_stream(pipe, prompts[0], H, W, seed=5)
    b = _past(pipe, shared, actions[0], 5)
    for x, y in zip(a, b, strict=True):
        assert torch.isfinite(y).all() and torch.equal(x, y)


@pytest.mark.parametrize("name", list(CACHES))
def test_each_fork_equals_its_run_alone_and_pages_are_shared(name):
    pipe, (prompts, actions) = _pipe(CACHES[name]), _inputs()
    past, fut_blocks = 3, 3
    parent = start_stream(pipe, prompts[0], H, W, seed=5)
    _past(pipe, parent, actions[0], past)
    arena = parent.cache.arena
    parent_pages = dict(parent.cache.table.pages)
    used_before = arena.pool.num_used_pages
    futures = _futures(prompts, actions)
    branches = Branches(pipe, parent, futures)
    # forking copies nothing: every parent page is mapped by the parent and the 3 forks
    assert arena.pool.num_used_pages == used_before
    assert all(arena.pool.pages[p].ref_cnt == 1 + len(futures) for p in parent_pages.values())
    outs = branches.run(fut_blocks)
    for fut, got in zip(futures, outs, strict=True):
        want = _alone(pipe, prompts, actions, past, fut, fut.actions, fut_blocks)
        assert torch.isfinite(got).all()
        assert (got - want).abs().max().item() <= 1e-5, fut.name
    # the futures differ from each other (different prompts/seeds reached the model)
    assert (outs[0] - outs[1]).abs().max() > 1e-2
    # memory grew only by the forks' own pages: used = parent's + each fork's own
    own = [len(s.cache.own_pages()) for s in branches.states]
    assert arena.pool.num_used_pages == len(parent.cache.table) + sum(own)
    if name == "global_page6":  # frames 0..8 past (pages 0, 1; page 1 half full), 9..17 future: pages 1 (COW), 2
        assert own == [2, 2, 2] and arena.num_page_copies == 3
        assert arena.pool.pages[parent_pages[0]].ref_cnt == 4  # page 0 still shared by all
    # drop all but one, then all: their pages return to the pool
    kept = branches.keep(1)
    assert arena.pool.num_used_pages == len(parent.cache.table) + len(kept[0].cache.own_pages())
    branches.keep()
    assert arena.pool.num_used_pages == len(parent.cache.table)
    release_stream(parent)
    assert arena.pool.num_used_pages == 0
    assert all(p.ref_cnt == 0 for p in arena.pool.pages)


def test_kept_fork_goes_on_as_a_stream_and_dropped_fork_refuses_to_run():
    pipe, (prompts, actions) = _pipe(CACHES["global_page6"]), _inputs()
    parent = start_stream(pipe, prompts[0], H, W, seed=5)
    _past(pipe, parent, actions[0], 1)
    branches = Branches(pipe, parent, [Future(seed=1), Future(seed=2)])
    branches.step()
    dropped = branches.states[0]
    (kept,) = branches.keep(1)
    out = pipe.denoise_block(kept, actions[1][:, :N])  # a kept fork is a plain stream again
    assert torch.isfinite(out.latents).all() and kept.next_frame == 3 * N
    with pytest.raises(ConfigError, match="released"):
        pipe.denoise_block(dropped, actions[1][:, :N])


def test_without_copy_on_write_forks_overwrite_each_other(monkeypatch):
    """The mutation the COW exists for: forks writing into the shared half-full page corrupt each other."""
    pipe, (prompts, actions) = _pipe(CACHES["global_page6"]), _inputs()
    past, fut_blocks = 3, 2
    monkeypatch.setattr(StreamKVCache, "copy_on_write", lambda self, start, n: 0)
    parent = start_stream(pipe, prompts[0], H, W, seed=5)
    _past(pipe, parent, actions[0], past)
    futures = _futures(prompts, actions)[:2]
    outs = Branches(pipe, parent, futures).run(fut_blocks)
    monkeypatch.undo()
    worst = max(
        (got - _alone(pipe, prompts, actions, past, fut, fut.actions, fut_blocks)).abs().max().item()
        for fut, got in zip(futures, outs, strict=True)
    )
    assert worst > 1e-3


def test_branching_refuses_a_plain_cache():
    pipe, (prompts, _) = _pipe(CACHES["global_page6"]), _inputs()
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    with pytest.raises(ConfigError, match="page arena"):
        Branches(pipe, state, [Future(seed=1)])


def test_one_fork_equals_its_run_alone_bitwise():
    """With batch 1 the batched path (one index for all streams) is the plain path, value for value."""
    pipe, (prompts, actions) = _pipe(CACHES["global_page6"]), _inputs()
    parent = start_stream(pipe, prompts[0], H, W, seed=5)
    _past(pipe, parent, actions[0], 3)
    fut = Future(context=prompts[1], actions=actions[1], seed=11)
    (got,) = Branches(pipe, parent, [fut]).run(2)
    assert torch.equal(got, _alone(pipe, prompts, actions, 3, fut, fut.actions, 2))


@pytest.mark.parametrize("name", list(CACHES))
def test_a_resumed_world_can_branch(tmp_path, name):
    """save → load (a plain paged cache) → adopt into an arena → fork: the fork continues as the saved run."""
    from inferix_core.engine.world_state import load_world_state, model_identity, save_world_state
    from inferix_core.pipeline.streams import adopt_stream

    pipe, (prompts, actions) = _pipe(CACHES[name]), _inputs()
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    _past(pipe, state, actions[0], 4)  # the window has slid (window 9): adoption copies only live frames
    ident = model_identity(pipe.model, "test")
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=ident)
    want = torch.cat([pipe.denoise_block(state, actions[1][:, N * b : N * (b + 1)]).latents for b in range(2)], 1)
    loaded = load_world_state(path, pipe, identity=ident)
    adopted = adopt_stream(pipe, loaded)
    assert isinstance(adopted.cache, StreamKVCache) and adopted.next_frame == 4 * N
    (got,) = Branches(pipe, adopted, [Future(actions=actions[1])]).run(2)
    assert torch.equal(got, want)


@pytest.mark.slow  # decodes 4 videos with the tiny Wan VAE (~50 s on a shared 2-core machine)
def test_branch_video_decodes_the_past_once_and_each_future_from_its_state():
    from inferix_core.clients.branching import branch_video
    from tests.test_api import tiny_world

    wm = tiny_world()
    g = torch.Generator().manual_seed(2)
    prompt, other = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    res = branch_video(wm, prompt, [None, other], past_blocks=2, future_blocks=2, width=48, height=32, seed=3,
                       future_seeds=[None, 9])  # fmt: skip
    # future 0 keeps prompt and noise: the uninterrupted run
    pipe = BlockDiffusionPipeline(wm.transformer, wm.sampling, wm.default_cache)
    state = pipe.start_stream(prompt, 4, 6, seed=3)
    plain = torch.cat([pipe.denoise_block(state).latents for _ in range(4)], dim=1)
    got = torch.cat([res.past_latents, res.future_latents[0]], dim=1)
    assert (got - plain).abs().max().item() <= 1e-5
    assert (res.future_latents[0] - res.future_latents[1]).abs().max() > 1e-2
    for i in range(2):  # past decoded once + the future from the past's decoder state == one full decode
        lat = torch.cat([res.past_latents, res.future_latents[i]], dim=1)
        full = ((wm.vae.decode(lat.permute(0, 2, 1, 3, 4))[0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        full = full.permute(1, 2, 3, 0).numpy()
        assert res.chosen(i).shape == full.shape
        assert abs(res.chosen(i).astype(int) - full.astype(int)).max() <= 1
    assert res.side_by_side().shape == (res.future_frames[0].shape[0], 32, 2 * 48, 3)
    assert res.stats["forks"] == 2 and res.stats["used_pages"] > 0


@pytest.mark.parametrize(
    "cache", [CACHES["window_sink_page3"], KVCacheConfig(window_frames=9, sink_frames=3)], ids=["paged", "ring"]
)
def test_a_kept_fork_can_be_saved_and_resumed(tmp_path, cache):
    """fork → keep → to_plain_stream → save → load → continue == the kept fork continuing in its arena."""
    from inferix_core.engine.world_state import load_world_state, model_identity, save_world_state
    from inferix_core.pipeline.streams import to_plain_stream

    pipe, (prompts, actions) = _pipe(cache), _inputs()
    parent = start_stream(pipe, prompts[0], H, W, seed=5)
    _past(pipe, parent, actions[0], 3)
    branches = Branches(pipe, parent, [Future(seed=1), Future(context=prompts[2], seed=2)])
    branches.run(2)
    (kept,) = branches.keep(1)
    release_stream(parent)
    ident = model_identity(pipe.model, "test")
    path = save_world_state(tmp_path / "fork.safetensors", pipe, to_plain_stream(pipe, kept), identity=ident)
    want = [pipe.denoise_block(kept, actions[1][:, N * b : N * (b + 1)]).latents for b in range(2)]
    resumed = load_world_state(path, pipe, identity=ident)
    assert resumed.next_frame == 5 * N and not isinstance(resumed.cache, StreamKVCache)
    for b in range(2):
        got = pipe.denoise_block(resumed, actions[1][:, N * b : N * (b + 1)]).latents
        assert torch.isfinite(got).all() and (got - want[b]).abs().max().item() <= 1e-5
