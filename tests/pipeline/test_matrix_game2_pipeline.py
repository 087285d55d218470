"""Matrix-Game 2.0 through BlockDiffusionPipeline against the authors' traces (README_matrix_game2.md §4–5).

Every `matrix_game2_*.safetensors` in tests/fixtures is found by glob and run from its `info` metadata
alone (model config, steps, window, variant: mouse or not, keyboard width), checking every step's x0,
the outputs, all stored caches (main, mouse, keyboard) and the cache bookkeeping within 1e-4.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.models.matrix_game2 import matrix_game_request
from inferix_core.pipeline import BlockDiffusionPipeline, PipelineHooks
from inferix_core.scheduler import FlowMatchScheduler
from tests.fixture_utils import fixture_files, read_fixture
from tests.matrix_game2_utils import FixtureNoise, build, to_bfchw

ATOL = 1e-4
FILES = fixture_files("matrix_game2_*.safetensors")
pytestmark = pytest.mark.skipif(not FILES, reason="no matrix_game2_*.safetensors in tests/fixtures")


class Recorder(PipelineHooks):
    def __init__(self):
        self.x0 = {}

    def on_step(self, index, step, x0):
        self.x0[(index, step)] = x0.clone()


def run_pipeline(path, cond=None):
    info, t, model, sampling, cache_cfg, fixture_cond = build(path)
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    req = matrix_game_request(cond or fixture_cond, p["num_blocks"], noise=FixtureNoise(t),
                              block_frames=sampling.block_frames)  # fmt: skip
    rec = Recorder()
    out, caches, ends = [], {}, []
    layer = p["action_cache_recorded_layer"]
    for block in pipe.stream(req, rec):
        out.append(block.latents)
        c = pipe.kv_cache
        slot = c.layer_slots[layer]
        caches[block.index] = {
            "kv_cache": c.main.logical_kv(0),
            "kv_cache_keyboard": c.keyboard.logical_kv(slot),
            **({"kv_cache_mouse": c.mouse.logical_kv(slot)} if c.mouse is not None else {}),
        }
        ends.append((c.attended_tokens, c.end_frame * c.spec.frame_tokens, c.keyboard.attended_tokens,
                     c.keyboard.end_frame))  # fmt: skip
    return info, t, pipe, rec, torch.cat(out, dim=1), caches, ends


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_scheduler_tables(path):
    info, tensors = read_fixture(path)
    p = info["pipeline"]
    sch = FlowMatchScheduler(p["timestep_shift"], p["num_train_timesteps"], p["scheduler"]["num_inference_steps"])
    ts = sch.timesteps_for(p["denoising_step_list"], p["warp_denoising_step"])
    assert torch.equal(ts, tensors["timesteps_warped"])
    assert torch.equal(sch.sigma_at(torch.cat([ts, torch.zeros(1) + p["context_noise"]])), tensors["sigmas_used"])


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_pipeline_parity(path):
    info, t, pipe, rec, latents, caches, ends = run_pipeline(path)
    p, tr = info["pipeline"], info["trace"]
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, to_bfchw(t["output_latents"]), atol=ATOL, rtol=0)
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], to_bfchw(t[f"block{b}.step{s}.x0_pred"]), atol=ATOL, rtol=0)
    layer = p["action_cache_recorded_layer"]
    checked = 0
    for b, stored in caches.items():
        for name, (k, v) in stored.items():
            tag = f"layer{0 if name == 'kv_cache' else layer}"
            key = f"{name}.{tag}.after_block{b}"
            if f"{key}.k" in t:
                torch.testing.assert_close(k, t[f"{key}.k"], atol=ATOL, rtol=0)
                torch.testing.assert_close(v, t[f"{key}.v"], atol=ATOL, rtol=0)
                checked += 1
    expected = sum(1 for k in t if k.startswith("kv_cache") and k.endswith(".k"))
    assert checked == expected > 0
    # cache bookkeeping of the reference (layer 0 / the first action layer; all layers behave the same)
    assert [e[0] for e in ends] == tr["local_end_after_block_layer0_main"]
    assert [e[1] for e in ends] == tr["global_end_after_block_layer0_main"]
    assert [e[2] for e in ends] == tr["local_end_after_block_layer0_keyboard"]
    assert [e[3] for e in ends] == tr["global_end_after_block_layer0_keyboard"]
    c = pipe.kv_cache
    assert c.main.num_eviction_events == len(tr["eviction_calls_layer0_main"])
    assert c.keyboard.num_eviction_events == len(tr["eviction_calls_layer0_keyboard"])
    if c.mouse is not None:
        assert c.mouse.num_eviction_events == len(tr["eviction_calls_layer0_mouse"])
    assert c.main.num_calls == tr["model_calls"]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_model_call(path):
    """Each recorded call (stored input → flow), context passes included, within 1e-4."""
    from inferix_core.cache import KVCacheSpec, create_kv_cache

    info, t, model, sampling, cache_cfg, cond = build(path)
    p = info["pipeline"]
    _, _, F, H, W = p["latent_shape"]
    n, cfg = sampling.block_frames, model.config
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), n, 1, max_frames=F)
    cache = model.extend_kv_cache(create_kv_cache(cache_cfg, spec), cache_cfg, spec)
    ctx = model.prepare_context(t["visual_context"])
    with torch.no_grad():
        for b in range(p["num_blocks"]):
            block = cond.for_block(b * n, n)
            assert block.keyboard.shape[1] == info["trace"]["action_rows_passed_per_block"][b]
            for s in range(len(p["denoising_step_list"])):
                cache.begin(b * n, n)
                flow = model(t[f"block{b}.step{s}.input"], t[f"block{b}.step{s}.timestep"], ctx, cache, b * n, block)
                torch.testing.assert_close(flow, t[f"block{b}.step{s}.flow_pred"], atol=ATOL, rtol=0)
            cache.begin(b * n, n)
            x0 = t[f"block{b}.step{len(p['denoising_step_list']) - 1}.x0_pred"]
            flow = model(x0, t[f"block{b}.context.timestep"], ctx, cache, b * n, block)
            torch.testing.assert_close(flow, t[f"block{b}.context.flow_pred"], atol=ATOL, rtol=0)
