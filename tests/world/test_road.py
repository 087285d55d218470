"""The procedural world is deterministic, and its actions move the view the way they say."""

from __future__ import annotations

import numpy as np

from inferix_core.world import latent_to_pixel_actions, render_episode
from inferix_core.world.compare import horizontal_shift, psnr, ssim
from inferix_core.world.road import LEFT, NONE, RIGHT


def test_render_is_deterministic() -> None:
    acts = latent_to_pixel_actions(np.array([0, 1, 3, 2]))
    a, b = render_episode(5, acts), render_episode(5, acts)
    assert a.shape == (13, 64, 64, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, render_episode(6, acts))


def test_steering_shifts_the_road() -> None:
    rows = slice(30, 52)
    for seed in range(3):
        base = render_episode(seed, latent_to_pixel_actions(np.full(5, NONE)))[-1]
        left = render_episode(seed, latent_to_pixel_actions(np.full(5, LEFT)))[-1]
        right = render_episode(seed, latent_to_pixel_actions(np.full(5, RIGHT)))[-1]
        assert horizontal_shift(left, base, rows) > 0  # car goes left, road moves right
        assert horizontal_shift(right, base, rows) < 0


def test_metrics() -> None:
    rng = np.random.default_rng(0)
    x = render_episode(1, [0, 0])[:, :32, :32]
    assert np.all(psnr(x, x) > 90) and np.allclose(ssim(x, x), 1.0)
    noisy = np.clip(x.astype(int) + rng.integers(-40, 40, x.shape), 0, 255).astype(np.uint8)
    assert np.all(psnr(noisy, x) < 25) and np.all(ssim(noisy, x) < 0.7)
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert horizontal_shift(np.roll(img, 3, axis=1), img, slice(0, 32)) == 3
