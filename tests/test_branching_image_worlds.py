"""Branching image-started and recompute worlds: each fork equals the same run done alone, or a one-line refusal.

* Wan 2.1 I2V (the parity fixture's tiny model): forks keep the start image's K/V, also under a new prompt, and
  take the image's cond_concat per block, batched; each equals a plain paged stream continued alone (≤ 1e-5).
* Krea's KV recompute with keep_first_frame=False: each fork gets the context latents, a fresh cache and a fork
  of the pixel window its first context frame is re-encoded from; the forks run one after another and each
  equals its run alone bitwise (a shared window would hand one fork the other's pixels).
* Matrix-Game 2.0 (its fixtures): refused before anything is forked, naming the action caches.

And the world states these runs need: a Wan 2.1 I2V world keeps the start image's K/V (resumed bitwise, through
`generate_video` too), and the bundled model's tiny VAE state forks for Branch World.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.api import EncoderPixels, generate_video
from inferix_core.cache import KVCacheConfig
from inferix_core.clients.branching import (
    Branches,
    Future,
    LiveBranch,
    branch_video,
    release_stream,
    start_stream,
)
from inferix_core.clients.session import InteractiveSession
from inferix_core.engine.image_world import StartImageInputs
from inferix_core.engine.run_output import pixels_to_uint8
from inferix_core.errors import ConfigError
from inferix_core.models.registry import FAMILIES, WorldModel, load_world_model
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig, SeededNoise
from inferix_core.vae import WanVAE
from inferix_core.vae.pixel_window import PixelWindowEncoder
from tests.fixture_utils import FIXTURES, files_of_kind, fixture_weights, read_fixture
from tests.matrix_game2_utils import build
from tests.test_api import tiny_world

I2V = files_of_kind("wan_i2v")
MG2 = files_of_kind("matrix_game2")
W, H = 48, 32  # the tiny VAE's 8x: latents 6 x 4


def _vae():
    _, v = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    return WanVAE.from_state_dict({k[8:]: x for k, x in v.items() if k.startswith("weights.")}).eval()


@pytest.fixture(scope="module")
def i2v():
    if not I2V:
        pytest.skip("no wan_i2v_*.safetensors in tests/fixtures")
    info, t = read_fixture(I2V[0])
    model = CausalWanTransformer(WanConfig.from_dict(info["config"]))
    model.load_state_dict(fixture_weights(I2V[0], info, t), strict=True)
    fam = FAMILIES["wan21_i2v"]
    return WorldModel("wan21_i2v", model.config, fam.sampling, fam.cache, model.eval(), _vae()), t


def test_wan_i2v_forks_keep_the_image_and_equal_their_runs_alone(i2v):
    wm, t = i2v
    prompt, clip = t["text_context"], t["clip_tokens"]
    other = torch.randn(prompt.shape, generator=torch.Generator().manual_seed(2))
    image = StartImageInputs(wm, np.random.RandomState(5).randint(0, 256, (48, 80, 3), dtype=np.uint8), W, H, clip)
    cache = KVCacheConfig(page_frames=wm.sampling.block_frames)
    pipe = BlockDiffusionPipeline(wm.transformer, wm.sampling, cache)
    n, lat = wm.sampling.block_frames, (H // 8, W // 8)
    parent = start_stream(pipe, prompt, *lat, seed=5, image_context=clip)
    assert parent.text.image_keys is not None
    for b in range(2):
        pipe.denoise_block(parent, image.for_block(b * n, n))
    futures = [Future(seed=1, actions=image.for_block), Future(context=other, seed=2, actions=image.for_block)]
    branches = Branches(pipe, parent, futures)
    assert all(f.state.text.image_keys is not None for f in branches.forks)  # the new prompt keeps the image
    got = branches.run(2)
    for fut, lat_f in zip(futures, got, strict=True):
        alone = pipe.start_stream(prompt, *lat, seed=5, image_context=clip)
        for b in range(2):
            pipe.denoise_block(alone, image.for_block(b * n, n))
        if fut.context is not None:
            pipe.set_prompt(alone, fut.context)
        alone.noise = SeededNoise(fut.seed)
        ref = torch.cat([pipe.denoise_block(alone, image.for_block(b * n, n)).latents for b in (2, 3)], dim=1)
        assert torch.isfinite(lat_f).all()
        torch.testing.assert_close(lat_f, ref, atol=1e-5, rtol=0)
    assert (got[0] - got[1]).abs().max() > 1e-3
    branches.keep()
    release_stream(parent)


KREA = SamplingConfig((1000, 500), block_frames=2, kv_recompute_frames=2, keep_first_frame=False)


def _krea_pipe(wm):
    return BlockDiffusionPipeline(wm.transformer, KREA, KVCacheConfig(), PixelWindowEncoder(wm.vae, 2))


@pytest.mark.slow  # ~40 s on a shared 2-core machine
def test_krea_reencode_forks_fork_the_pixel_window_and_equal_their_runs_alone():
    wm = tiny_world()
    g = torch.Generator().manual_seed(3)
    prompt, other = torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    pipe = _krea_pipe(wm)
    parent = pipe.start_stream(prompt, 4, 6, seed=4)
    for _ in range(3):  # past the roll: the first context frame is re-encoded from the window
        pipe.denoise_block(parent)
    own = pipe.first_frame_encoder
    futures = [Future(seed=1), Future(context=other, seed=2)]
    branches = Branches(pipe, parent, futures)
    got = branches.run(2)
    assert pipe.first_frame_encoder is own and len(own.frames) == own.max_frames  # the parent's window untouched
    assert branches.stats()["kv_recompute"]
    for fut, lat_f in zip(futures, got, strict=True):
        ref_pipe = _krea_pipe(wm)
        alone = ref_pipe.start_stream(prompt, 4, 6, seed=4)
        for _ in range(3):
            ref_pipe.denoise_block(alone)
        if fut.context is not None:
            ref_pipe.set_prompt(alone, fut.context)
        alone.noise = SeededNoise(fut.seed)
        ref = torch.cat([ref_pipe.denoise_block(alone).latents for _ in range(2)], dim=1)
        assert torch.isfinite(lat_f).all()
        assert torch.equal(lat_f, ref)
    with pytest.raises(ConfigError, match="keep one fork"):
        branches.keep(0, 1)
    (kept,) = branches.keep(1)
    assert pipe.first_frame_encoder is branches.forks[0].encoder  # the kept fork goes on with its window
    nxt = pipe.denoise_block(kept).latents
    assert torch.isfinite(nxt).all()


def test_krea_branch_video_and_live_branch_run():
    wm = dataclasses.replace(tiny_world(), sampling=KREA)
    g = torch.Generator().manual_seed(6)
    out = branch_video(wm, torch.randn(1, 4, 8, generator=g), [None, torch.randn(1, 4, 8, generator=g)],
                       past_blocks=2, future_blocks=2, width=W, height=H, seed=1)  # fmt: skip
    assert out.side_by_side().shape[2] == 2 * W and len(out.chosen(1)) == len(out.past_frames) + 2 * 2 * 4
    pipe = _krea_pipe(wm)
    state = pipe.start_stream(torch.randn(1, 4, 8, generator=g), 4, 6, seed=4)
    pipe.denoise_block(state)
    live = LiveBranch(pipe, state, [Future(seed=1), Future(seed=2)], EncoderPixels(pipe.first_frame_encoder))
    _, frames = live.step()
    assert len(frames) == 2 and not np.array_equal(frames[0], frames[1])  # each fork shows its own pixels
    _, decoder, _, _ = live.pick(0)
    assert decoder.encoder is pipe.first_frame_encoder


def test_matrix_game_branching_is_refused_with_the_reason():
    if not MG2:
        pytest.skip("no matrix_game2_*.safetensors in tests/fixtures")
    _, _, model, sampling, cache, cond = build(MG2[0])
    pipe = BlockDiffusionPipeline(model, sampling, cache)
    state = pipe.start_stream(cond.visual_context, *cond.cond_concat.shape[3:], seed=1)
    pipe.denoise_block(state, cond.for_block(0, sampling.block_frames))
    with pytest.raises(ConfigError, match="Matrix-Game world cannot branch yet: its keyboard/mouse action caches"):
        Branches(pipe, state, [Future(seed=1)])
    with pytest.raises(ConfigError, match="Matrix-Game world cannot branch yet"):
        LiveBranch(pipe, state, [Future(seed=1)])


def test_branch_video_on_the_bundled_model_forks_its_tiny_vae_decoder():
    """Each future is decoded from a fork of the past's tiny-VAE state: as if past + future were one stream."""
    wm = load_world_model("bundled", device="cpu")
    out = branch_video(wm, "", [None, None], past_blocks=1, future_blocks=1, width=64, height=64, seed=2)
    for lat, frames in zip(out.future_latents, out.future_frames, strict=True):
        dec = wm.vae.stream_decoder()
        dec.decode(out.past_latents.permute(0, 2, 1, 3, 4))
        assert np.array_equal(frames, pixels_to_uint8(dec.decode(lat.permute(0, 2, 1, 3, 4))))
    assert not np.array_equal(out.future_frames[0], out.future_frames[1])


def test_a_wan_i2v_world_keeps_the_start_image_k_v(i2v):
    """A saved Wan 2.1 I2V world carries the start image's cross-attention K/V: resumed, it continues bitwise."""
    from inferix_core.engine.world_state import WorldState, capture_world_state, load_world_state, model_identity

    wm, t = i2v
    image = StartImageInputs(wm, np.random.RandomState(5).randint(0, 256, (48, 80, 3), dtype=np.uint8), W, H,
                             t["clip_tokens"])  # fmt: skip
    pipe = BlockDiffusionPipeline(wm.transformer, wm.sampling, wm.default_cache)
    n, lat = wm.sampling.block_frames, (H // 8, W // 8)
    state = pipe.start_stream(t["text_context"], *lat, seed=5, image_context=t["clip_tokens"])
    pipe.denoise_block(state, image.for_block(0, n))
    ident = model_identity(wm.transformer, "wan21_i2v")
    world = capture_world_state(pipe, state, identity=ident)
    want = pipe.denoise_block(state, image.for_block(n, n)).latents
    resumed = load_world_state(world, pipe, identity=ident)
    assert resumed.text.image_keys is not None
    assert torch.equal(pipe.denoise_block(resumed, image.for_block(n, n)).latents, want)
    bare = WorldState(world.header, {k: v for k, v in world.tensors.items() if not k.startswith("text.i")})
    with pytest.raises(ConfigError, match="no start-image K/V"):
        load_world_state(bare, pipe, identity=ident)


def test_generate_video_continues_a_wan_i2v_world(i2v):
    wm, t = i2v
    img = np.random.RandomState(5).randint(0, 256, (48, 80, 3), dtype=np.uint8)
    kw = dict(width=W, height=H, seed=7, start_image=img, clip_vision=t["clip_tokens"], keep_world_state=True)
    first = generate_video(wm, t["text_context"], num_blocks=1, **kw)
    once = generate_video(wm, t["text_context"], num_blocks=2, world_state=first.world_state, **kw)
    a = generate_video(wm, t["text_context"], num_blocks=1, world_state=first.world_state, **kw)
    b = generate_video(wm, t["text_context"], num_blocks=1, world_state=a.world_state, **kw)
    assert torch.isfinite(once.latents).all()
    assert torch.equal(once.latents, torch.cat([a.latents, b.latents], dim=1))
    assert np.array_equal(once.frames, np.concatenate([a.frames, b.frames]))


def test_a_wan_i2v_session_branches_and_keeping_future_0_is_the_unbranched_session(i2v):
    wm, t = i2v
    img = np.random.RandomState(5).randint(0, 256, (48, 80, 3), dtype=np.uint8)
    other = torch.randn(t["text_context"].shape, generator=torch.Generator().manual_seed(8))

    def session():
        return InteractiveSession(wm, t["text_context"], width=W, height=H, seed=1, decode=False, start_image=img,
                                  clip_vision=t["clip_tokens"], prompt_encoder=lambda text: other)  # fmt: skip

    with session() as plain:
        want = [plain.step().latents for _ in range(3)]
    with session() as s:
        got = [s.step().latents]
        assert s.branch([None, "another prompt"])
        both = s.step().latents  # (2, n, C, h, w): one row per future
        assert s.pick(0)
        got += [both[:1], s.step().latents]
    assert (both[0] - both[1]).abs().max() > 1e-3
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
