"""A Wan 2.1 I2V run end to end (prompt + start image + CLIP vision → blocks), on the parity fixture's tiny model.

`generate_video` and `InteractiveSession` must hand the model what the parity tests check it against: the
prompt as the cross-attention context, the start image's CLIP tokens beside it (`image_context`), and per block
the cond_concat (mask + VAE latents of [image ; zero frames]) of the block's latent frames.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.clients.session import InteractiveSession
from inferix_core.engine.image_conditioning import StartImageLatents, start_image_pixels
from inferix_core.errors import ConfigError
from inferix_core.models.registry import FAMILIES, WorldModel
from inferix_core.models.wan.block_inputs import StartImageConditioning
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES, files_of_kind, fixture_weights, read_fixture

FILES = files_of_kind("wan_i2v")
pytestmark = pytest.mark.skipif(not FILES, reason="no wan_i2v_*.safetensors in tests/fixtures")
W, H, BLOCKS = 48, 32, 2  # latents 6 × 4 through the tiny VAE's 8×


@pytest.fixture(scope="module")
def world():
    info, t = read_fixture(FILES[0])
    model = CausalWanTransformer(WanConfig.from_dict(info["config"]))
    model.load_state_dict(fixture_weights(FILES[0], info, t), strict=True)
    _, v = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    vae = WanVAE.from_state_dict({k[8:]: x for k, x in v.items() if k.startswith("weights.")}).eval()
    fam = FAMILIES["wan21_i2v"]
    return WorldModel("wan21_i2v", model.config, fam.sampling, fam.cache, model.eval(), vae), t


@pytest.fixture
def image():
    return np.random.RandomState(5).randint(0, 256, (48, 80, 3), dtype=np.uint8)


@pytest.mark.slow
def test_generate_video_is_the_pipeline_with_the_image_inputs(world, image):
    wm, t = world
    prompt, clip = t["text_context"], t["clip_tokens"]
    out = generate_video(wm, prompt, num_blocks=BLOCKS, width=W, height=H, seed=7, start_image=image,
                         clip_vision=clip, decode=False)  # fmt: skip
    assert torch.isfinite(out.latents).all() and out.latents.shape[1] == BLOCKS * wm.sampling.block_frames
    # by hand: cond_concat = mask + encode([image ; 4·(F − 1) zero frames]); the tokens beside the prompt
    frames = BLOCKS * wm.sampling.block_frames
    cond = StartImageLatents(wm.vae, start_image_pixels(image, H, W)).cond_concat(0, frames)
    assert torch.equal(cond[:, :4, 0], torch.ones_like(cond[:, :4, 0])) and not cond[:, :4, 1:].any()
    req = GenerationRequest(num_blocks=BLOCKS, latent_height=H // 8, latent_width=W // 8, context=prompt, seed=7,
                            image_context=clip, actions=StartImageConditioning(cond))  # fmt: skip
    ref = BlockDiffusionPipeline(wm.transformer, wm.sampling, wm.default_cache)
    torch.testing.assert_close(out.latents, ref.generate(req), atol=1e-5, rtol=0)
    other = generate_video(wm, prompt, num_blocks=BLOCKS, width=W, height=H, seed=7, start_image=255 - image,
                           clip_vision=clip, decode=False)  # fmt: skip
    assert (other.latents - out.latents).abs().max() > 1e-3  # the start image's latents steer it


def test_inputs_a_wan_i2v_run_refuses(world, image):
    wm, t = world
    kw = dict(num_blocks=1, width=W, height=H, decode=False)
    with pytest.raises(ConfigError, match="starts from an image"):
        generate_video(wm, t["text_context"], clip_vision=t["clip_tokens"], **kw)
    with pytest.raises(ConfigError, match="CLIP vision"):
        generate_video(wm, t["text_context"], start_image=image, **kw)
    with pytest.raises(ConfigError, match="takes no actions"):
        generate_video(wm, t["text_context"], start_image=image, clip_vision=t["clip_tokens"], actions=["a"], **kw)


def test_session_feeds_the_image_every_block(world, image):
    wm, t = world
    session = InteractiveSession(wm, t["text_context"], width=W, height=H, seed=1, decode=False, start_image=image,
                                 clip_vision=t["clip_tokens"])  # fmt: skip
    assert session.state.text.image_keys is not None
    blocks = [session.step() for _ in range(BLOCKS)]
    assert all(b is not None and torch.isfinite(b.latents).all() for b in blocks)
    session.close()
