"""World state save/resume (issue #22): resuming after k blocks equals never stopping, bitwise (CPU, fp32).

Checked for the ring, paged, offloaded and int8/int4-quantized caches, global and windowed, with
per-block actions, a prompt switch before and after the save, and the streaming VAE decoder's cache; an
offloaded state resumes on the resident paged cache and back; states from another model or other
settings are refused with the reason. Matrix-Game's action caches: tests/test_world_state_matrix_game.py.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.engine.world_state import load_world_state, model_identity, read_world_state, save_world_state
from inferix_core.errors import ConfigError
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2, action_dim=3)
H, W = 4, 6
CACHES = {
    "ring_global": KVCacheConfig(),
    "ring_window_sink": KVCacheConfig(window_frames=6, sink_frames=1),
    "paged_window_sink": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3),
    "paged_global": KVCacheConfig(page_frames=3),
    "offload_window_sink": KVCacheConfig(window_frames=9, sink_frames=3, page_frames=3, offload="always"),
    "offload_global": KVCacheConfig(offload="always"),  # pages of one block, grown past the planned length
    "int8_window_sink": KVCacheConfig(window_frames=9, sink_frames=3, quantization="int8"),
    "int4_global": KVCacheConfig(quantization="int4", residual_frames=4),
}


def _model(seed=0):
    model = CausalWanTransformer(CFG)
    model.load_state_dict(random_wan_state_dict(CFG, seed=seed))
    return model.eval()


def _inputs():
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randn(1, 4, 8, generator=g) for _ in range(3)]
    actions = torch.randn(1, 3 * 12, 3, generator=g)
    return prompts, actions


def _run(pipe, state, blocks, prompts, actions, switch_at):
    out = []
    for b in blocks:
        ctx = prompts[switch_at[b]] if b in switch_at else None
        out.append(pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3], context=ctx).latents)
    return out


@pytest.mark.parametrize("name", list(CACHES))
def test_resume_equals_never_stopping(tmp_path, name):
    model, (prompts, actions) = _model(), _inputs()
    sampling = SamplingConfig()
    switch_at = {2: 1, 6: 2}  # a prompt switch before the save and one after it
    pipe = BlockDiffusionPipeline(model, sampling, CACHES[name])
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    _run(pipe, state, range(4), prompts, actions, switch_at)
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))
    uninterrupted = _run(pipe, state, range(4, 9), prompts, actions, switch_at)  # 9 blocks: rings wrap, pages recycle

    other = BlockDiffusionPipeline(_model(), sampling, CACHES[name])  # a fresh process's model, same weights
    resumed = load_world_state(path, other, identity=model_identity(other.model, "test"))
    assert (resumed.next_frame, resumed.next_block) == (12, 4)
    out = _run(other, resumed, range(4, 9), prompts, actions, switch_at)
    assert torch.isfinite(torch.cat(out)).all()
    for a, b in zip(uninterrupted, out, strict=True):
        assert torch.equal(a, b)


def test_decoder_cache_resumes_too(tmp_path):
    model, (prompts, actions) = _model(), _inputs()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), KVCacheConfig(window_frames=6, sink_frames=1))
    vae = WanVAE.from_file(FIXTURES / "wan_vae_tiny.safetensors").eval()
    model16 = pipe  # the tiny VAE decodes 16-channel latents; the model's 16 output channels match
    decoder = vae.stream_decoder()
    state = model16.start_stream(prompts[0], H, W, seed=1)
    for b in range(2):
        latents = model16.denoise_block(state, actions[:, 3 * b : 3 * b + 3]).latents
        decoder.decode(latents.permute(0, 2, 1, 3, 4))
    path = save_world_state(
        tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "t"), decoder=decoder
    )
    frames = [decoder.decode(model16.denoise_block(state, actions[:, 6:9]).latents.permute(0, 2, 1, 3, 4))]

    decoder2 = vae.stream_decoder()
    state2 = load_world_state(path, pipe, identity=model_identity(model, "t"), decoder=decoder2)
    frames2 = [decoder2.decode(pipe.denoise_block(state2, actions[:, 6:9]).latents.permute(0, 2, 1, 3, 4))]
    assert frames[0].shape[2] == 12  # a later block: 4 frames per latent, no warm-up drop
    assert torch.equal(frames[0], frames2[0])


def _saved(tmp_path, cache=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    model, (prompts, actions) = _model(), _inputs()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), cache or CACHES["ring_window_sink"])
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    _run(pipe, state, range(2), prompts, actions, {})
    return save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))


def test_state_of_another_model_or_setting_is_refused(tmp_path):
    path = _saved(tmp_path)
    other_weights = _model(seed=1)
    pipe = BlockDiffusionPipeline(other_weights, SamplingConfig(), CACHES["ring_window_sink"])
    with pytest.raises(ConfigError, match="another model weights"):
        load_world_state(path, pipe, identity=model_identity(other_weights, "test"))
    same = _model()
    with pytest.raises(ConfigError, match="another model family"):
        load_world_state(path, BlockDiffusionPipeline(same, SamplingConfig(), CACHES["ring_window_sink"]),
                         identity=model_identity(same, "longlive"))  # fmt: skip
    pipe = BlockDiffusionPipeline(same, SamplingConfig(), KVCacheConfig(window_frames=9, sink_frames=1))
    with pytest.raises(ConfigError, match=r"KV cache settings \(window_frames: saved 6, here 9\)"):
        load_world_state(path, pipe, identity=model_identity(same, "test"))
    pipe = BlockDiffusionPipeline(same, SamplingConfig(shift=8.0), CACHES["ring_window_sink"])
    with pytest.raises(ConfigError, match="another sampling"):
        load_world_state(path, pipe, identity=model_identity(same, "test"))


def test_files_are_never_overwritten_and_bad_files_are_named(tmp_path):
    path = _saved(tmp_path)
    header = read_world_state(path).header
    assert header["position"] == {"next_frame": 6, "next_block": 2, "shot_index": 0, "rope_offset": 0.0}
    model = _model()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), CACHES["ring_window_sink"])
    state = pipe.start_stream(torch.randn(1, 4, 8), H, W)
    with pytest.raises(ConfigError, match="never overwritten"):
        save_world_state(path, pipe, state, identity=model_identity(model, "test"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match="not a readable world state"):
        read_world_state(junk)
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize(("saved", "resumed"), [("offload_window_sink", "paged_window_sink"),
                                               ("paged_window_sink", "offload_window_sink")])  # fmt: skip
def test_offload_is_a_memory_lever_a_state_moves_across_it(tmp_path, saved, resumed):
    """Offload reads the same slots in the same order as the resident paged cache: a state moves across."""
    model, (prompts, actions) = _model(), _inputs()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), CACHES[saved])
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    _run(pipe, state, range(4), prompts, actions, {2: 1})
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))
    uninterrupted = _run(pipe, state, range(4, 8), prompts, actions, {6: 2})
    other = BlockDiffusionPipeline(_model(), SamplingConfig(), CACHES[resumed])
    out = _run(other, load_world_state(path, other, identity=model_identity(model, "test")), range(4, 8), prompts,
               actions, {6: 2})  # fmt: skip
    assert type(other.kv_cache).__name__ != type(pipe.kv_cache).__name__
    for a, b in zip(uninterrupted, out, strict=True):
        assert torch.equal(a, b)


def test_quantized_states_are_refused_with_other_bits_residual_or_pages(tmp_path):
    path = _saved(tmp_path, CACHES["int8_window_sink"])
    same = _model()
    cases = [
        (KVCacheConfig(window_frames=9, sink_frames=3, quantization="int4"), "quantization: saved 'int8', here 'int4'"),
        (KVCacheConfig(window_frames=9, sink_frames=3, quantization="int8", residual_frames=6),
         "residual_frames: saved 3, here 6"),
        (KVCacheConfig(window_frames=9, sink_frames=3), "quantization: saved 'int8', here 'none'"),
    ]  # fmt: skip
    for cache, message in cases:
        pipe = BlockDiffusionPipeline(same, SamplingConfig(), cache)
        with pytest.raises(ConfigError, match=message):
            load_world_state(path, pipe, identity=model_identity(same, "test"))
    offloaded = _saved(tmp_path / "o", CACHES["offload_global"])  # pages of one block; a ring has none
    with pytest.raises(ConfigError, match="page_frames: saved 3, here 0"):
        load_world_state(offloaded, BlockDiffusionPipeline(same, SamplingConfig(), KVCacheConfig()),
                         identity=model_identity(same, "test"))  # fmt: skip


@pytest.mark.parametrize("name", ["ring_window_sink", "paged_window_sink", "offload_window_sink", "int8_window_sink"])
def test_resume_after_a_kv_recache(tmp_path, name):
    """A re-cache restarts the window (the ring re-bases its origin): the saved state must carry that."""
    model, (prompts, actions) = _model(), _inputs()
    pipe = BlockDiffusionPipeline(model, SamplingConfig(), CACHES[name])
    state = pipe.start_stream(prompts[0], H, W, seed=5)
    blocks = [(b * 3, pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3]).latents) for b in range(5)]
    # LongLive's re-cache (as InteractiveSession.recache): new prompt, then the resident blocks again
    pipe.set_prompt(state, prompts[1])
    resident = set(state.cache.resident_frames())
    kept = [(s, x) for s, x in blocks if resident.intersection(range(s, s + 3))]
    state.cache.reset()
    for s, x in kept:
        if s > state.cache.end_frame:
            state.cache.restart(s)
        pipe.context_pass(state, x, s, actions[:, s : s + 3])
    assert state.cache.resident_frames() == sorted(resident)
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))
    uninterrupted = [pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3]).latents for b in range(5, 9)]
    other = BlockDiffusionPipeline(_model(), SamplingConfig(), CACHES[name])
    resumed = load_world_state(path, other, identity=model_identity(other.model, "test"))
    out = [other.denoise_block(resumed, actions[:, 3 * b : 3 * b + 3]).latents for b in range(5, 9)]
    for a, b in zip(uninterrupted, out, strict=True):
        assert torch.equal(a, b)


def test_resume_after_a_shot_pin_equals_never_stopping(tmp_path):
    """LongLive 2.0 shots (shot sinks + RoPE offset): the pinned cache and the shot's RoPE offset resume too."""
    model, (prompts, actions) = _model(), _inputs()
    sampling = SamplingConfig(shot_sinks=True, shot_rope_offset=3.0)
    cache = KVCacheConfig(window_frames=8, sink_frames=2)  # the pin reaches the sink at block 3 and stays
    pipe = BlockDiffusionPipeline(model, sampling, cache)
    state = pipe.start_stream(prompts[0], H, W, seed=5)

    def run(pipe, state, blocks):
        return [pipe.denoise_block(state, actions[:, 3 * b : 3 * b + 3], new_shot=b in (2, 6)).latents for b in blocks]

    run(pipe, state, range(4))
    assert state.cache.has_pin and state.cache.pin_position == 2 and state.shot_index == 1
    path = save_world_state(tmp_path / "w.safetensors", pipe, state, identity=model_identity(model, "test"))
    uninterrupted = run(pipe, state, range(4, 9))
    other = BlockDiffusionPipeline(_model(), sampling, cache)
    resumed = load_world_state(path, other, identity=model_identity(other.model, "test"))
    assert (resumed.shot_index, resumed.rope_offset) == (1, 3.0)
    for a, b in zip(uninterrupted, run(other, resumed, range(4, 9)), strict=True):
        assert torch.equal(a, b)


def test_a_new_run_releases_the_last_runs_state_before_allocating_its_cache(monkeypatch):
    """stream() keeps its last state for a world-state capture; the next run must drop it (and its KV cache)
    before allocating its own, or two caches coexist (the 8 GiB H200 run ran out exactly there)."""
    import weakref

    import inferix_core.pipeline.block_diffusion as bd
    from inferix_core.pipeline import GenerationRequest

    pipe = BlockDiffusionPipeline(_model(), SamplingConfig(), CACHES["ring_window_sink"])
    prompts, actions = _inputs()
    request = GenerationRequest(num_blocks=2, latent_height=H, latent_width=W, context=prompts[0], actions=actions)
    pipe.generate(request)
    old = weakref.ref(pipe.stream_state.cache)
    alive_at_allocation = []
    real = bd.create_kv_cache

    def spy(*args, **kwargs):
        alive_at_allocation.append(old() is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(bd, "create_kv_cache", spy)
    pipe.generate(request)
    assert alive_at_allocation == [False]
