"""Matrix-Game 2.0 world states: the keyboard/mouse action caches are saved and resumed with the main cache.

Built from each `matrix_game2_*.safetensors` fixture's metadata (tests/matrix_game2_utils.py): resuming
after half the fixture's blocks equals never stopping, bitwise (CPU, fp32), with the fixture's keyboard
and mouse rows and a switch of the start image's visual tokens after the save, for the main cache as a
ring (the authors' setting), paged, offloaded and int8; a state of another variant or window is refused.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.engine.world_state import load_world_state, model_identity, save_world_state
from inferix_core.errors import ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline
from tests.fixture_utils import files_of_kind
from tests.matrix_game2_utils import build

FILES = files_of_kind("matrix_game2")
KINDS = {
    "ring": {},
    "paged": {"page_frames": 3},
    "offload": {"offload": "always"},
    "int8": {"quantization": "int8"},
}


def _cache(base: KVCacheConfig, kind: str) -> KVCacheConfig:
    return dataclasses.replace(base, **KINDS[kind])


def _blocks(pipe, state, cond, blocks, n, switch):
    out = []
    for b in blocks:
        out.append(pipe.denoise_block(state, cond.for_block(b * n, n), context=switch.get(b)).latents)
    return out


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_resume_with_action_caches_equals_never_stopping(tmp_path, path, kind):
    info, _, model, sampling, cache, cond = build(path)
    n, total = sampling.block_frames, info["pipeline"]["num_blocks"]
    k = total // 2
    other_tokens = torch.randn(cond.visual_context.shape, generator=torch.Generator().manual_seed(3))
    switch = {k + 1: other_tokens}  # a prompt (here: visual token) switch after the save
    pipe = BlockDiffusionPipeline(model, sampling, _cache(cache, kind))
    state = pipe.start_stream(cond.visual_context, *cond.cond_concat.shape[3:], seed=7)
    assert type(state.cache).__name__ == "ActionKVCache"
    _blocks(pipe, state, cond, range(k), n, switch)
    ident = model_identity(model, "matrix_game2")
    saved = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=ident)
    uninterrupted = _blocks(pipe, state, cond, range(k, total), n, switch)

    _, _, model2, _, _, _ = build(path)  # a fresh process: the same file loaded again
    other = BlockDiffusionPipeline(model2, sampling, _cache(cache, kind))
    resumed = load_world_state(saved, other, identity=model_identity(model2, "matrix_game2"))
    assert (resumed.next_block, resumed.next_frame) == (k, k * n)
    assert resumed.cache.keyboard.end_frame == k * n
    out = _blocks(other, resumed, cond, range(k, total), n, switch)
    assert torch.isfinite(torch.cat(out)).all()
    for a, b in zip(uninterrupted, out, strict=True):
        assert torch.equal(a, b)


def test_a_state_of_another_variant_or_window_is_refused(tmp_path):
    if len(FILES) < 2:
        pytest.skip("needs two Matrix-Game fixtures")
    _, _, model, sampling, cache, cond = build(FILES[0])
    pipe = BlockDiffusionPipeline(model, sampling, cache)
    state = pipe.start_stream(cond.visual_context, cond.cond_concat.shape[3], cond.cond_concat.shape[4], seed=1)
    pipe.denoise_block(state, cond.for_block(0, sampling.block_frames))
    saved = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "matrix_game2"))
    _, _, other_model, other_sampling, other_cache, _ = build(FILES[1])
    with pytest.raises(ConfigError, match="another model config"):
        load_world_state(saved, BlockDiffusionPipeline(other_model, other_sampling, other_cache),
                         identity=model_identity(other_model, "matrix_game2"))  # fmt: skip
    wider = dataclasses.replace(cache, window_frames=cache.window_frames + sampling.block_frames)
    with pytest.raises(ConfigError, match=rf"window_frames: saved {cache.window_frames}, here"):
        load_world_state(saved, BlockDiffusionPipeline(model, sampling, wider),
                         identity=model_identity(model, "matrix_game2"))  # fmt: skip
