"""The v2 evaluation measures what it says: proxy VDE against closed forms, and a random model fails the bar.

The model tests run a tiny random transformer (with the shipped autoencoder) on the v2 world at 32×32,
so they take seconds; the real bundle is measured by `python -m training.evaluate` (docs/world_model.md).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from inferix_core.errors import ConfigError
from inferix_core.models.bundled import BundledWorldModel, load_bundled
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from training.data import episode_actions, episode_seed
from training.evaluate import (
    BAR,
    EVAL_SEED,
    STEER_BASE,
    EvalSettings,
    brightness_frames,
    evaluate,
    proxy_scores,
    proxy_vde,
    rollout,
    steering,
    world_of,
)
from training.steering_check import geometric_road_shift
from training.world import SCENES, latent_to_pixel_actions, random_actions, render_episode
from training.world.compare import horizontal_shift, road_centre_shift
from training.world.road import LEFT, NONE, PALETTES, RIGHT


def _luma(frames: np.ndarray) -> np.ndarray:
    f = frames.astype(np.float64)
    return 0.299 * f[..., 0] + 0.587 * f[..., 1] + 0.114 * f[..., 2]


def _vde_closed(m: list[float]) -> float:
    n = len(m)
    return sum((n - i + 1) * abs(m[i - 1] - m[0]) / m[0] for i in range(2, n + 1))


def test_proxy_vde_of_the_renderer_is_the_closed_form() -> None:
    acts = latent_to_pixel_actions(random_actions(np.random.default_rng(3), 11))  # 41 frames, 10 chunks of 4
    frames = render_episode(4, acts, 48, 48, scene=SCENES[0])
    scores = proxy_scores(frames)
    g = _luma(frames)
    lap = g[:, :-2, 1:-1] + g[:, 2:, 1:-1] + g[:, 1:-1, :-2] + g[:, 1:-1, 2:] - 4 * g[:, 1:-1, 1:-1]
    chunks = [slice(4 * i, 4 * i + 4) for i in range(10)]
    clarity = [lap[c].reshape(4, -1).var(1).mean() for c in chunks]
    bright = [g[c].mean() for c in chunks]
    np.testing.assert_allclose(scores["clarity"], clarity, rtol=1e-5)
    np.testing.assert_allclose(scores["brightness"], bright, rtol=1e-9)
    v = proxy_vde(frames, frames)
    assert v["clarity"]["vde_truth"] == pytest.approx(_vde_closed(clarity), rel=1e-5)
    assert v["brightness"]["vde_truth"] == pytest.approx(_vde_closed(bright), rel=1e-9)
    for name in ("clarity", "brightness", "background"):
        assert v[name]["vde_generated"] == v[name]["vde_truth"] > 0 and v[name]["ratio"] == 1.0


def test_brightness_and_background_vde_of_a_brightness_ramp() -> None:
    """Chunk i is one flat grey m₁(1 + a(i − 1)): brightness VDE = a·Σ (N − i + 1)(i − 1); background VDE = 0."""
    m1, a, n = 60.0, 0.05, 10
    frames = np.concatenate([np.full((3, 8, 8, 3), round(m1 * (1 + a * i)), np.uint8) for i in range(n)])
    levels = [round(m1 * (1 + a * i)) for i in range(n)]
    np.testing.assert_allclose(brightness_frames(frames), np.repeat(levels, 3))
    v = proxy_vde(frames, frames[::-1].copy())
    assert v["brightness"]["vde_generated"] == pytest.approx(_vde_closed(levels), rel=1e-12)
    assert v["background"]["vde_generated"] == 0.0  # every chunk is one frame repeated: consistency 1


def _tiny_random_v2_bundle(size: int = 32) -> BundledWorldModel:
    """A random 1-layer transformer, the shipped autoencoder, and a v2 config at `size`²."""
    shipped = load_bundled(random_transformer=True)
    torch.manual_seed(0)
    wcfg = WanConfig(dim=32, ffn_dim=64, freq_dim=32, text_dim=32, text_len=4, num_heads=2, num_layers=1, action_dim=5)
    config = copy.deepcopy(shipped.config)
    lat = size // 8
    config.update(world="road", height=size, width=size, latent_height=lat, latent_width=lat)
    return BundledWorldModel(CausalWanTransformer(wcfg).eval(), shipped.vae, torch.randn(1, 4, 32), config)


@pytest.fixture(scope="module")
def tiny_bundle() -> BundledWorldModel:
    return _tiny_random_v2_bundle()


def test_rollout_follows_the_bundle_world_and_context(tiny_bundle: BundledWorldModel) -> None:
    assert world_of(tiny_bundle).name == "road" and world_of(tiny_bundle).height == 32
    shipped = load_bundled(random_transformer=True)  # the shipped v2 files: road.py at their size, their scenes
    assert (world_of(shipped).name, world_of(shipped).height) == ("road", shipped.config["height"])
    v1 = dataclasses.replace(shipped, config={k: v for k, v in shipped.config.items() if k not in ("prompt", "world")})
    with pytest.raises(ConfigError, match="084f673"):  # a v1 config (no prompt section): its own commit's world
        world_of(v1)
    lat = np.array([0, 1, 3, 0, 2, 4])
    with torch.inference_mode():
        a, _ = rollout(tiny_bundle, 5, lat, scene=SCENES[1])
        b, _ = rollout(tiny_bundle, 5, lat, scene=SCENES[1])
        c, _ = rollout(tiny_bundle, 5, lat, scene=SCENES[1], context=torch.randn(1, 4, 32))
    assert a.shape == (1 + 4 * 5, 32, 32, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[9:], c[9:])  # the context conditions the generated frames


@pytest.mark.slow  # ~10 s on a quiet 2-core machine, 35 s on a busy one
def test_a_random_model_fails_the_palette_and_fidelity_bar(tiny_bundle: BundledWorldModel, tmp_path) -> None:
    """Mutation-style: the bar must reject a random transformer, while the renderer's own frames pass it."""
    settings = EvalSettings(fidelity_episodes=1, steer_cases=2, minutes=0.04, speed_seconds=1.0, scenes=SCENES)
    sheet = tmp_path / "sheet.png"
    res = evaluate(tiny_bundle, settings, only=("fidelity", "long"), contact_sheet_path=sheet, log=lambda _: None)
    assert Image.open(sheet).size[1] == 14 + 2 * len(SCENES) * (32 + 2)  # a model row and a truth row per scene
    assert res["fidelity"]["psnr_mean"] < BAR["psnr_db"] and res["fidelity"]["ssim_mean"] < BAR["ssim"]
    scenes = res["long"]["scenes"]
    assert set(scenes) == set(SCENES)
    assert all(r["palette_truth"]["agreement"] == 1.0 for r in scenes.values())  # the classifier on the truth
    assert not all(r["palette"]["agreement"] >= BAR["palette_agreement"] for r in scenes.values())
    failed = {row["measure"] for row in res["verdict"] if not row["pass"]}
    assert "PSNR first 2 s (dB)" in failed and any("palette" in m for m in failed)


def test_steering_cases_have_a_clear_true_direction(tiny_bundle: BundledWorldModel) -> None:
    with torch.inference_mode():
        res = steering(tiny_bundle, cases=3)
    assert res["total"] == 3 and 0 <= res["agree"] <= 3 and 0 <= res["agree_channel_mean"] <= 3
    for c in res["cases"]:
        assert abs(c["true_shift"]) >= 2
        assert np.sign(c["true_shift"]) == (1 if c["steer"] == "left" else -1)  # the renderer's own direction


# Held-out steering starts (evaluate.STEER_BASE + i) where the channel-mean `horizontal_shift` misreads the
# renderer's own frames: -1, 0 or +1 px against a road centre moved 6.6-9.4 px (15 of the first 80 cases read so).
CHANNEL_MEAN_MISREADS = ((212, "right"), (214, "right"), (223, "left"), (223, "right"), (229, "right"), (235, "left"))


def test_the_steering_estimator_reads_the_renderers_own_road_shift() -> None:
    """On the renderer's frames (no model), road_centre_shift has the sign and size of the road centre's move
    that the renderer's projection computes; the channel-mean horizontal_shift that steering used before
    misreads these cases, which is why it was replaced (so this test fails with it)."""
    size, n = 96, 3
    rows = slice(int(0.6 * size), int(0.8 * size))
    for start, steer in CHANNEL_MEAN_MISREADS:
        i = start - STEER_BASE
        scene, seed = SCENES[i % len(SCENES)], episode_seed(EVAL_SEED, start)
        base = episode_actions(EVAL_SEED, start, n)
        acts = {
            k: latent_to_pixel_actions(np.concatenate([base, np.full(n, a)]))
            for k, a in ((steer, LEFT if steer == "left" else RIGHT), ("none", NONE))
        }
        frames = {k: render_episode(seed, v, size, size, scene=scene)[-1] for k, v in acts.items()}
        geometric = geometric_road_shift(seed, acts[steer], acts["none"], rows, size, scene)
        assert abs(geometric) > 6 and np.sign(geometric) == (1 if steer == "left" else -1)
        palette = np.asarray(PALETTES[scene], dtype=np.float64)
        got = road_centre_shift(frames[steer], frames["none"], rows, palette[[5, 6]], palette[[3, 4]])
        assert abs(got - geometric) < 1.5, (start, steer, got, geometric)
        old = horizontal_shift(frames[steer], frames["none"], rows, size // 4)
        assert abs(old) <= 1 and abs(old - geometric) > 5, (start, steer, old, geometric)  # the misread above


@pytest.mark.cuda
def test_quick_evaluation_runs_on_cuda() -> None:
    b = _tiny_random_v2_bundle()
    b = BundledWorldModel(b.transformer.cuda(), b.vae.cuda(), b.context.cuda(), b.config)
    settings = EvalSettings(fidelity_episodes=1, steer_cases=1, minutes=0.04, speed_seconds=1.0, scenes=SCENES[:1])
    res = evaluate(b, settings, log=lambda _: None)
    assert res["speed"]["device"].startswith("cuda") and res["steering"]["total"] == 1
    assert {row["measure"] for row in res["verdict"]} and np.isfinite(res["fidelity"]["psnr_mean"])
