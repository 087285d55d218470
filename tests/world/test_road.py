"""The procedural world is deterministic, its scenes are explicit conditions, and its actions do what they say."""

from __future__ import annotations

import numpy as np
import pytest

from inferix_core.errors import ConfigError
from training.world import (
    SCENE_WORDS,
    SCENES,
    latent_to_pixel_actions,
    random_actions,
    render_episode,
    scene_for_seed,
    scene_from_prompt,
    scene_words,
)
from training.world.compare import horizontal_shift, psnr, ssim
from training.world.road import LEFT, NONE, PALETTES, RIGHT, Redraw, RoadWorld, Track, hidden_future

SMALL = {"height": 48, "width": 48}


def test_render_is_deterministic() -> None:
    acts = latent_to_pixel_actions(np.array([0, 1, 3, 2]))
    a, b = render_episode(5, acts), render_episode(5, acts)
    assert a.shape == (13, 96, 96, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, render_episode(6, acts))


def test_scene_api() -> None:
    assert len(SCENES) >= 2 and set(SCENES) == set(PALETTES)
    assert [scene_for_seed(s) for s in range(len(SCENES))] == list(SCENES)  # consecutive seeds balance
    for s in SCENES:
        words = scene_words(s)
        assert words[0] == s and set(words) <= set(SCENE_WORDS)
        assert scene_from_prompt(f"A drive, {words[-1].upper()}!") == s
    assert len(set(SCENE_WORDS)) == len(SCENE_WORDS)  # no word names two scenes
    with pytest.raises(ConfigError, match="use one of"):
        scene_words("dusk")
    with pytest.raises(ConfigError, match="names no scene"):
        scene_from_prompt("a drive")
    with pytest.raises(ConfigError, match="several"):
        scene_from_prompt(f"{SCENES[0]} and {SCENES[1]}")
    with pytest.raises(ConfigError, match=SCENES[0]):
        render_episode(0, [0], **SMALL, scene="dusk")


def test_scene_changes_only_the_palette() -> None:
    """Same seed and actions under two scenes: the same geometry (edges), different colours."""
    acts = latent_to_pixel_actions(np.array([0, 1, 3]))
    a = render_episode(3, acts, **SMALL, scene=SCENES[0])
    b = render_episode(3, acts, **SMALL, scene=SCENES[1])
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 20
    assert np.array_equal(render_episode(3, acts, **SMALL), render_episode(3, acts, **SMALL, scene=scene_for_seed(3)))


def test_steering_shifts_the_road() -> None:
    rows = slice(55, 80)  # ground rows between the horizon and the car at 96×96
    for seed in range(3):
        base = render_episode(seed, latent_to_pixel_actions(np.full(5, NONE)))[-1]
        left = render_episode(seed, latent_to_pixel_actions(np.full(5, LEFT)))[-1]
        right = render_episode(seed, latent_to_pixel_actions(np.full(5, RIGHT)))[-1]
        assert horizontal_shift(left, base, rows) > 0  # car goes left, road moves right
        assert horizontal_shift(right, base, rows) < 0


def test_random_policy_mostly_on_the_road() -> None:
    """v1's random policy left the car on the grass for most of a minute; v2 keeps it on the road ≥ 90 %."""
    on_road, lanes_changed = [], 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        acts = latent_to_pixel_actions(random_actions(rng, 240))  # a minute
        world = RoadWorld(seed, 8, 8)
        lat = []
        for a in acts[1:]:
            world.step(int(a))
            lat.append(world.state.lateral)
        lat = np.asarray(lat)
        on_road.append(np.mean(np.abs(lat) < 1.0))
        lanes_changed += int(np.ptp(lat) > 0.6)
    assert np.mean(on_road) >= 0.9, on_road  # measured 0.95 over these seeds
    assert lanes_changed >= 4  # steering still moves the car between lanes


def test_hills_move_the_horizon_and_traffic_is_overtaken() -> None:
    world = RoadWorld(4, 96, 96)
    horizons, passed = [], 0
    for _ in range(FPS_MINUTE := 16 * 60):
        world.step(NONE)
        horizons.append(world._project()[4])
    gaps = world.traffic.positions(world.state.time) - world.state.position
    start_gaps = world.traffic.start - RoadWorld(4, 8, 8).state.position
    passed = int(((start_gaps > 0) & (gaps < 0)).sum())
    assert np.ptp(horizons) > 3, "hills should move the horizon by a few rows"
    assert passed >= 3, f"overtook only {passed} cars in {FPS_MINUTE} frames"


def test_track_redraw_keeps_the_curves_up_to_the_cut() -> None:
    track, before = Track(3), Track(3).curvature
    track.redraw_beyond(500.0, np.random.default_rng(1))
    cut = int(500.0 / track.resolution)
    np.testing.assert_array_equal(track.curvature[: cut + 1], before[: cut + 1])
    assert not np.array_equal(track.curvature[cut + 1 : cut + 2000], before[cut + 1 : cut + 2000])


def test_hidden_future_keeps_the_prefix_and_redraws_the_rest() -> None:
    """An alternative future (training/fidelity_bound.py): the first 9 frames are bit for bit the episode's, the
    rest differs; a Redraw that also re-draws what those frames show (view 5) changes them, so the check can fail."""
    for seed in range(2):
        acts = latent_to_pixel_actions(random_actions(np.random.default_rng(seed), 40))  # 10 s
        truth = render_episode(seed, acts, **SMALL)
        redraw = hidden_future(seed, acts, 8, 1)
        assert len(redraw.states) == 9
        alt = render_episode(seed, acts, **SMALL, redraw=redraw)
        np.testing.assert_array_equal(alt[:9], truth[:9])
        assert not np.array_equal(alt[9:], truth[9:])
        other = render_episode(seed, acts, **SMALL, redraw=hidden_future(seed, acts, 8, 2))
        assert not np.array_equal(other[9:], alt[9:])  # the redraw seed picks the future
        near = Redraw(1, redraw.states, view=5.0)
        assert not np.array_equal(render_episode(seed, acts[:9], **SMALL, redraw=near), truth[:9])


def test_metrics() -> None:
    rng = np.random.default_rng(0)
    x = render_episode(1, [0, 0])[:, :32, :32]
    assert np.all(psnr(x, x) > 90) and np.allclose(ssim(x, x), 1.0)
    noisy = np.clip(x.astype(int) + rng.integers(-40, 40, x.shape), 0, 255).astype(np.uint8)
    assert np.all(psnr(noisy, x) < 25) and np.all(ssim(noisy, x) < 0.7)
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert horizontal_shift(np.roll(img, 3, axis=1), img, slice(0, 32)) == 3
