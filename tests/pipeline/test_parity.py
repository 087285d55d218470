"""Parity of the causal transformer + pipeline with the reference traces in tests/fixtures.

Every plain Self-Forcing-schema run (found by content, any name) is run from its metadata alone, so a new fixture
with the same schema is tested with no code change.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline
from inferix_core.scheduler import FlowMatchScheduler
from tests.fixture_utils import (  # FixtureNoise, Recorder: imported from here by other tests too
    FixtureNoise,  # noqa: F401
    Recorder,
    assert_sigmas_used,
    fixture_request,
    fixture_weights,
    read_fixture,
    self_forcing_runs,
    settings_from_metadata,
)

ATOL = 1e-4
FILES = self_forcing_runs()


def build(path):
    info, tensors = read_fixture(path)
    cfg = WanConfig.from_dict(info["config"])
    model = CausalWanTransformer(cfg)
    model.load_state_dict(fixture_weights(path, info, tensors), strict=True)
    sampling, cache = settings_from_metadata(info)
    return info, tensors, model.eval(), sampling, cache


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_scheduler_tables(path):
    info, tensors = read_fixture(path)
    p = info["pipeline"]
    sch = FlowMatchScheduler(p["timestep_shift"], p["num_train_timesteps"], p["scheduler"]["num_inference_steps"])
    assert torch.equal(sch.sigmas, tensors["scheduler.sigmas"])
    assert torch.equal(sch.timesteps, tensors["scheduler.timesteps"])
    ts = sch.timesteps_for(p["denoising_step_list"], p["warp_denoising_step"])
    assert torch.equal(ts, tensors["timesteps_warped" if p["warp_denoising_step"] else "timesteps_used"])
    assert_sigmas_used(sch, ts, p, tensors["sigmas_used"])


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_pipeline_parity(path):
    info, t, model, sampling, cache_cfg = build(path)
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    rec = Recorder()
    req = fixture_request(p, t)
    kv_after, attended, global_end = {}, [], []
    out = []
    for block in pipe.stream(req, rec):
        out.append(block.latents)
        pipe.settle()  # write the block's K/V now (stream() runs its context pass on the next block)
        kv_after[block.index] = pipe.kv_cache.logical_kv(0)
        attended.append(pipe.kv_cache.attended_tokens)
        global_end.append(pipe.kv_cache.end_frame * pipe.kv_cache.spec.frame_tokens)
    latents = torch.cat(out, dim=1)
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
        k_key = f"kv_cache.layer0.after_block{b}.k"
        if k_key in t:
            k, v = kv_after[b]
            torch.testing.assert_close(k, t[k_key], atol=ATOL, rtol=0)
            torch.testing.assert_close(v, t[f"kv_cache.layer0.after_block{b}.v"], atol=ATOL, rtol=0)
    # trace of the reference's cache bookkeeping (layer 0; every layer behaves the same)
    tr = info["trace"]
    assert attended == tr["local_end_after_block_layer0"]
    assert global_end == tr["global_end_after_block_layer0"]
    assert pipe.kv_cache.num_eviction_events == tr["evictions_per_layer"]
    assert pipe.kv_cache.num_calls == tr["model_calls"]
    assert tr["calls_per_block"] == len(p["denoising_step_list"]) + 1


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_model_call(path):
    """Each recorded call (inputs → flow), including the context passes, within 1e-4."""
    info, t, model, sampling, cache_cfg = build(path)
    from inferix_core.cache import KVCacheSpec, create_kv_cache

    p = info["pipeline"]
    B, F, _C, H, W = p["latent_shape"]
    n = sampling.block_frames
    cfg = model.config
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), n, B, max_frames=F)
    cache = create_kv_cache(cache_cfg, spec)
    text = model.prepare_context(t["text_context"])
    with torch.no_grad():
        for b in range(p["num_blocks"]):
            for s in range(len(p["denoising_step_list"])):
                cache.begin(b * n, n)
                flow = model(
                    t[f"block{b}.step{s}.input"].permute(0, 2, 1, 3, 4),
                    t[f"block{b}.step{s}.timestep"],
                    text,
                    cache,
                    b * n,
                ).permute(0, 2, 1, 3, 4)
                torch.testing.assert_close(flow, t[f"block{b}.step{s}.flow_pred"], atol=ATOL, rtol=0)
            cache.begin(b * n, n)
            last = len(p["denoising_step_list"]) - 1
            x0 = t[f"block{b}.step{last}.x0_pred"].permute(0, 2, 1, 3, 4)
            flow = model(x0, t[f"block{b}.context.timestep"], text, cache, b * n).permute(0, 2, 1, 3, 4)
            torch.testing.assert_close(flow, t[f"block{b}.context.flow_pred"], atol=ATOL, rtol=0)
    assert cache.num_calls == info["trace"]["model_calls"]
