"""`Engine.plan`: the run's memory plan for a shape, equal to `plan_run`'s, allocating nothing; `plan_run`'s
`streams` against a closed form. Each test names the mutant it kills."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core import memory
from inferix_core.cache import KVCacheConfig, plan_costs, planner
from inferix_core.engine import Engine
from inferix_core.engine.run_plan import plan_run
from inferix_core.memory import plan as plan_module
from inferix_core.models.handle import WorldModel
from tests.test_api import tiny_world


@pytest.mark.parametrize("cache", [KVCacheConfig(window_frames=4), KVCacheConfig(window_frames=4, gpu_budget_bytes=64)])
def test_engine_plan_is_plan_run_and_allocates_nothing(cache, monkeypatch):
    """Same numbers and message as plan_run with the engine's sampling and cache; no cache is built, no tensor
    allocated (every torch.empty/zeros/... result off the meta device would be counted). Kills: the engine's sampling or cache not passed
    (the model's block_frames 2, not the engine's 1; the model's cache, no budget), an allocation."""
    wm = tiny_world()
    engine = Engine(wm, dataclasses.replace(wm.sampling, block_frames=1), cache)  # not the model's 2
    made = []
    for name in ("empty", "zeros", "ones", "randn", "empty_strided", "full"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _r=real, **k: made.append(_r(*a, **k)) or made[-1])
    plan = engine.plan(48, 32, 3, available_bytes=10**9)
    monkeypatch.undo()
    # a dtype's size is read off a 0-d tensor (plan_costs.element_bytes); meta tensors are counted, not stored
    assert [t.shape for t in made if t.device.type != "meta" and t.dim()] == [] and not hasattr(engine, "stream")
    want = plan_run(wm, cache, 48, 32, 3, engine.sampling, available_bytes=10**9)
    assert plan.to_dict() == want.to_dict() and plan.describe() == want.describe()
    assert plan.budget_bytes == want.budget_bytes and plan.requested == cache


def test_streams_batch_the_cache_the_decoder_and_the_frames():
    """Two streams: the KV cache and the decoder's bytes double (each a batch row), the frames kept in host memory
    double (48 × 32 × 3 bytes a frame, 1 + 4 × (3 blocks × 2 frames − 1) = 21 frames); the weights do not.
    Kills `streams` not reaching the PlanInput (cache), the decoder, or the host frames."""
    wm = tiny_world()
    one = plan_run(wm, KVCacheConfig(window_frames=4), 48, 32, 3, available_bytes=10**9)
    two = plan_run(wm, KVCacheConfig(window_frames=4), 48, 32, 3, available_bytes=10**9, streams=2)
    assert two.requested_cache.device_bytes == 2 * one.requested_cache.device_bytes
    assert two.weights_bytes == one.weights_bytes
    assert two.vae_kept_bytes - two.vae_weights_bytes == 2 * (one.vae_kept_bytes - one.vae_weights_bytes) > 0
    assert one.host.frame_bytes * one.host.num_frames == 48 * 32 * 3 * 21
    assert two.host.frame_bytes * two.host.num_frames == 2 * 48 * 32 * 3 * 21


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("cache", [KVCacheConfig(window_frames=4), KVCacheConfig(window_frames=4, gpu_budget_bytes=64)])
def test_plan_run_composes_once(cache, cuda, monkeypatch):
    """One `memory.compose` per plan, however the budget is found: the cache's own budget sits beside the rest
    read off the rows (`RunParts.fixed_bytes`), the free memory of a GPU is asked before the rows are composed.
    Kills a first plan to learn `plan.fixed_bytes`, or one without the budget composed and thrown away."""
    wm = tiny_world()
    if cuda:  # the free-memory budget of a GPU, without one: its device and its free memory stand in
        monkeypatch.setattr(WorldModel, "device", property(lambda self: torch.device("cuda")))
        monkeypatch.setattr(plan_costs, "available_memory_bytes", lambda device: (10**9, "free memory of cuda"))
    calls = []
    real = plan_module.compose
    for module in (plan_module, memory, planner):
        monkeypatch.setattr(module, "compose", lambda *a, **k: calls.append(a) or real(*a, **k))
    plan = plan_run(wm, cache, 48, 32, 3, available_bytes=10**9)
    assert len(calls) == 1
    if cache.gpu_budget_bytes is not None:
        assert plan.budget_bytes == plan.fixed_bytes + cache.gpu_budget_bytes
    else:
        assert plan.budget_bytes == (10**9 if cuda else None)


def test_an_offload_budget_too_small_for_its_staging_layers_is_refused_in_one_line():
    """An offloaded cache whose gpu_budget_bytes cannot hold even its two staging layers has no cost to plan
    with: plan_run refuses it with the cache's own reason and fix (it raised AttributeError before)."""
    import pytest

    from inferix_core.cache import KVCacheConfig
    from inferix_core.engine.run_plan import plan_run
    from inferix_core.errors import CacheBudgetError
    from tests.test_api import tiny_world

    with pytest.raises(CacheBudgetError, match=r"staging layers .* raise gpu_budget_bytes"):
        plan_run(tiny_world(), KVCacheConfig(offload="auto", gpu_budget_bytes=10), 48, 32, 3)
