"""A saved world keeps the cache's window origin when it is saved right after a restart (issue #43, section 7).

The re-cache test (test_world_state.py) restarts where `window_origin` equals end − ring, so a restore that drops
the origin still passes there. Here block 0 is context-passed again after a reset and the window restarts at
frame 12, far past end − ring: the resident frames are [0, 1, 2, 12, 13, 14] only while the origin is 12.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.engine.world_state import load_world_state, model_identity, save_world_state
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig
from tests.test_world_state import CFG, H, W, _inputs, _model

CACHES = {
    "ring": KVCacheConfig(window_frames=9, sink_frames=3),
    "paged": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3),
    "offload": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3, offload="always"),
    "int8": KVCacheConfig(window_frames=9, sink_frames=3, quantization="int8"),
}


@pytest.mark.parametrize("name", list(CACHES))
def test_resume_right_after_a_restart_keeps_the_window_origin(tmp_path, name):
    assert CFG.num_layers >= 1
    model, (prompts, actions) = _model(), _inputs()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), CACHES[name])
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    blocks = [pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3]).latents for b in range(5)]
    state.cache.reset()
    pipe.context_pass(state, blocks[0], 0, actions[:, 0:3])
    state.cache.restart(12)
    pipe.context_pass(state, blocks[4], 12, actions[:, 12:15])
    assert state.cache.resident_frames() == [0, 1, 2, 12, 13, 14]
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))
    uninterrupted = [pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3]).latents for b in range(5, 9)]
    other = BlockDiffusionPipeline(_model(), SamplingConfig(), CACHES[name])
    resumed = load_world_state(path, other, identity=model_identity(other.model, "test"))
    assert resumed.cache.resident_frames() == [0, 1, 2, 12, 13, 14]
    out = [other.denoise_block(resumed, actions[:, 3 * b : 3 * b + 3]).latents for b in range(5, 9)]
    for a, b in zip(uninterrupted, out, strict=True):
        assert torch.isfinite(a).all() and torch.equal(a, b)
