"""One model, several resolutions in turn: each run equals a fresh model's run at that size.

Per-size state (the RoPE table cache, keyed by frame positions, height and width, and the KV-cache
geometry) must not leak from one size to the next: a table cached for another width, or a height, would
give wrong rotations or shapes. Sizes are derived from each fixture's metadata.
"""

from __future__ import annotations

import torch

from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SeededNoise
from tests.pipeline.test_parity import FILES, build


def run(model, sampling, cache_cfg, context, h, w, num_blocks, seed):
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    shape = (context.shape[0], num_blocks * sampling.block_frames, model.config.in_dim, h, w)
    noise = SeededNoise(seed, total_shape=shape)
    req = GenerationRequest(num_blocks, h, w, context, batch_size=context.shape[0], noise=noise)
    return pipe.generate(req)


def test_one_model_at_two_resolutions_equals_fresh_models():
    path = FILES[0]  # the property is the model's, not the fixture's; one keeps the test short
    info, t, model, sampling, cache_cfg = build(path)
    p = info["pipeline"]
    _, _, _, H, W = p["latent_shape"]
    _, ph, pw = model.config.patch_size
    blocks = 1
    # same height with another width, then another height with that width
    sizes = [(H, W), (H, W + 2 * pw), (H + ph, W + 2 * pw)]
    for i, (h, w) in enumerate(sizes):
        got = run(model, sampling, cache_cfg, t["text_context"], h, w, blocks, seed=i)
        fresh = build(path)[2]  # a model that has never run at another size
        want = run(fresh, sampling, cache_cfg, t["text_context"], h, w, blocks, seed=i)
        assert got.shape[-2:] == (h, w) and torch.isfinite(got).all()
        assert torch.equal(got, want), (h, w)
