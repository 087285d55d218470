"""The family knobs of SamplingConfig: first_block_denoising_steps (Causal-Forcing++) and kv_recompute_frames (Krea).

Their parity with the authors' code is in test_family_parity.py; here: validation, and the recompute's
bookkeeping (which frames, at which positions, how many calls) on a tiny model.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.errors import ConfigError
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, PipelineHooks, SamplingConfig
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2)


def test_knob_validation():
    with pytest.raises(ConfigError, match="empty"):
        SamplingConfig(first_block_denoising_steps=())
    with pytest.raises(ConfigError, match="kv_recompute_frames"):
        SamplingConfig(kv_recompute_frames=-1)
    with pytest.raises(ConfigError, match="cannot be combined"):
        SamplingConfig(kv_recompute_frames=3, independent_first_frame=True)
    assert SamplingConfig(first_block_denoising_steps=[1000, 500]).first_block_denoising_steps == (1000, 500)


class Steps(PipelineHooks):
    def __init__(self):
        self.steps = []

    def on_step(self, index, step, x0):
        self.steps.append((index, step))


def _pipe(sampling: SamplingConfig) -> BlockDiffusionPipeline:
    model = CausalWanTransformer(CFG)
    model.load_state_dict(random_wan_state_dict(CFG, seed=1))
    return BlockDiffusionPipeline(model.eval(), sampling, KVCacheConfig())


def _request(num_blocks: int) -> GenerationRequest:
    return GenerationRequest(num_blocks, 4, 4, torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0)))


def test_first_block_has_its_own_step_list():
    pipe = _pipe(SamplingConfig((1000, 500), block_frames=1, first_block_denoising_steps=(1000, 750, 500, 250)))
    hooks = Steps()
    pipe.generate(_request(3), hooks)
    assert hooks.steps == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert pipe.first_timesteps.numel() == 4 and pipe.timesteps.numel() == 2


def test_kv_recompute_rebuilds_the_cache_from_first_and_newest_frames():
    k, n = 4, 3
    pipe = _pipe(SamplingConfig(block_frames=n, kv_recompute_frames=k))
    calls = []
    real = pipe._call

    inputs = []

    def spy(state, x, t, start, frames, action, **kwargs):
        calls.append((start, frames, float(t), state.cache.end_frame))
        inputs.append(x.clone())
        return real(state, x, t, start, frames, action, **kwargs)

    pipe._call = spy
    blocks = list(pipe.stream(_request(4)))
    latents = torch.cat([b.latents for b in blocks], dim=1)
    steps = len(pipe.timesteps)
    # block 0: steps only, at position 0, no context pass
    assert calls[:steps] == [(0, n, float(t), 0 if i == 0 else n) for i, t in enumerate(pipe.timesteps.tolist())]
    # block 1: rebuilt from frames 0..2 (3 < K), then the block sits at position 3
    rest = calls[steps:]
    assert rest[0][:3] == (0, 3, 0.0) and rest[1][:2] == (3, n)
    # block 2 on: first frame + newest K-1 = 4 frames, in chunks of 3 then 1; the block at position 4
    b2 = rest[1 + steps :]
    assert [c[:3] for c in b2[:2]] == [(0, 3, 0.0), (3, 1, 0.0)] and b2[2][:2] == (k, n)
    assert pipe.kv_cache.spec.max_frames == k + n  # the cache never holds more than K + one block
    # before the last block (frames 9..11) the cache is rebuilt from frame 0 and frames 6, 7, 8
    per_block = steps + 2  # two recompute chunks + the steps, from block 2 on
    last = inputs[len(inputs) - per_block : len(inputs) - steps]
    torch.testing.assert_close(torch.cat(last, dim=1), torch.cat([latents[:, :1], latents[:, 6:9]], dim=1))
    assert torch.isfinite(latents).all()
