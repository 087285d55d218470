"""Start image → pixels and cond_concat (Matrix-Game 2.0), against closed forms on the tiny Wan VAE fixture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from inferix_core.engine.image_conditioning import StartImageLatents, resize_crop_box, start_image_pixels
from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES, read_fixture


@pytest.fixture(scope="module")
def vae():
    _, t = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    return WanVAE.from_state_dict({k[8:]: v for k, v in t.items() if k.startswith("weights.")}).eval()


def test_crop_box_keeps_the_centre_at_the_target_aspect():
    assert resize_crop_box(1280, 720, 352, 640) == (0.0, 8.0, 1280.0, 712.0)  # 16:9 → 640:352, trims rows
    left, top, right, bottom = resize_crop_box(500, 500, 352, 640)
    assert (top, bottom) == (112.5, 387.5) and (left, right) == (0.0, 500.0)  # 500·352/640 = 275 rows
    left, top, right, bottom = resize_crop_box(1000, 200, 352, 640)
    assert (top, bottom) == (0.0, 200.0) and right - left == 363  # int(200·640/352)


def test_pixels_match_an_independent_antialiased_resize():
    rng = np.random.RandomState(0)
    smooth = torch.nn.functional.interpolate(torch.from_numpy(rng.rand(1, 3, 12, 20)).float(), size=(121, 200))
    image = (smooth[0].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
    got = start_image_pixels(image, 44, 80)
    assert got.shape == (1, 3, 44, 80) and got.min() >= -1 and got.max() <= 1
    # crop 121x200 → rows [5.5, 115.5), which PIL rounds (half to even) to [6, 116), then resize
    box = resize_crop_box(200, 121, 44, 80)
    assert box == (0.0, 5.5, 200.0, 115.5)
    crop = torch.from_numpy(image[6:116]).permute(2, 0, 1)[None].float() / 255
    ref = F.interpolate(crop, size=(44, 80), mode="bilinear", antialias=True, align_corners=False) * 2 - 1
    assert (got - ref).abs().max() < 3 / 255  # PIL rounds to 8 bits between its two passes; torch does not


def test_comfy_image_float_and_uint8_inputs_agree():
    rng = np.random.RandomState(1)
    u8 = rng.randint(0, 256, (60, 100, 3), dtype=np.uint8)
    comfy = torch.from_numpy(u8).float().div(255).unsqueeze(0)  # what Load Image gives: exact k/255
    by_u8 = start_image_pixels(u8, 32, 48)
    assert torch.equal(start_image_pixels(comfy, 32, 48), by_u8)
    assert torch.equal(start_image_pixels(Image.fromarray(u8), 32, 48), by_u8)
    smooth = comfy + torch.rand_like(comfy) * 0.5 / 255  # not on the 8-bit grid: the float path, no rounding
    assert (start_image_pixels(smooth, 32, 48) - by_u8).abs().max() < 3 / 255
    with pytest.raises(ShapeMismatchError, match=r"\[H, W, 3\]"):
        start_image_pixels(torch.zeros(8, 8), 32, 48)
    with pytest.raises(ConfigError, match="does not exist"):
        start_image_pixels("/no/such/image.png", 32, 48)


def test_cond_concat_is_mask_plus_the_encoded_padded_clip(vae):
    torch.manual_seed(0)
    pixels = torch.rand(1, 3, 32, 48) * 2 - 1
    num_latent = 5
    clip = torch.cat([pixels.unsqueeze(2), torch.zeros(1, 3, 4 * (num_latent - 1), 32, 48)], dim=2)
    expected_latents = vae.encode(clip)  # the authors' encode of [image ; 4·(F−1) zero frames]
    mask = torch.zeros(1, 4, num_latent, 4, 6)
    mask[:, :, 0] = 1
    expected = torch.cat([mask, expected_latents], dim=1)
    start = StartImageLatents(vae, pixels)
    first = start.cond_concat(0, 2)  # asked for block by block, the zero frames encode lazily
    later = start.cond_concat(2, 3)
    got = torch.cat([first, later], dim=2)
    assert got.shape == (1, 20, num_latent, 4, 6) and torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert later[:, :4].abs().sum() == 0 and first[:, :4, 0].min() == 1
    assert (expected_latents[:, :, 1] - expected_latents[:, :, 0]).abs().max() > 1e-2  # the image frame differs


def test_start_latents_need_an_encoder():
    with pytest.raises(ConfigError, match=r"Wan2\.1_VAE"):
        StartImageLatents(None, torch.zeros(1, 3, 8, 8))


@pytest.mark.slow
def test_long_runs_reuse_the_constant_tail_exactly(vae):
    """Far from the image the encoder's cache stops changing: the repeated tail equals a full encode."""
    torch.manual_seed(1)
    pixels = torch.rand(1, 3, 32, 48) * 2 - 1
    num_latent = 36
    clip = torch.cat([pixels.unsqueeze(2), torch.zeros(1, 3, 4 * (num_latent - 1), 32, 48)], dim=2)
    expected = vae.encode(clip, frames_per_step=16)
    start = StartImageLatents(vae, pixels)
    got = torch.cat([start.latents(s, 3) for s in range(0, num_latent, 3)], dim=2)
    assert start.steady_from is not None and start.steady_from < num_latent - 3
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    tail = got[:, :, start.steady_from :]
    assert torch.equal(tail, tail[:, :, :1].expand_as(tail))
