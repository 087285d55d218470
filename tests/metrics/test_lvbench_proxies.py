"""The weight-free proxies on synthetic videos whose drift is known, and their labelling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from inferix_core.metrics import (
    background_proxy,
    dynamic_proxy,
    motion_proxy,
    score_video,
    subject_proxy,
)
from inferix_core.metrics.lvbench import base_metrics as bm
from inferix_core.metrics.lvbench import proxies

from .videos import box_blur, frozen, noisy, texture, translating


def test_progressive_blur_raises_clarity_drift() -> None:
    rng = np.random.default_rng(10)
    img = texture(rng, 48, 64, cell=2)
    blurred = np.stack([box_blur(img, t // 4) for t in range(40)])  # sharper → softer, radius 0..9
    steady = np.stack([noisy(rng, img) for _ in range(40)])
    r_blur = score_video(blurred, metrics=["clarity"], chunks=10)
    r_steady = score_video(steady, metrics=["clarity"], chunks=10)
    chunk_scores = r_blur.metrics["clarity"].chunk_scores
    assert all(a > b for a, b in itertools.pairwise(chunk_scores))  # sharpness falls every chunk
    assert r_blur.metrics["clarity"].vde > 10 * r_steady.metrics["clarity"].vde
    assert r_blur.metrics["clarity"].start_end_contrast > 0


def test_frozen_video_is_perfectly_smooth_and_static() -> None:
    video = frozen(np.random.default_rng(11))
    assert motion_proxy(video) == pytest.approx(1.0)
    assert dynamic_proxy(video, fps=8) == 0.0
    assert background_proxy(video) == pytest.approx(1.0)
    assert subject_proxy(video) == pytest.approx(1.0)


def test_translating_video_is_dynamic_and_less_smooth() -> None:
    rng = np.random.default_rng(12)
    video = translating(rng, step=4)
    assert dynamic_proxy(video, fps=8) == 1.0
    assert motion_proxy(video) < motion_proxy(frozen(rng))


def test_block_matching_recovers_a_known_shift() -> None:
    video = translating(np.random.default_rng(13), t=2, h=64, w=64, step=3)
    flow = proxies.block_matching_flow(video[1], video[0])  # frame 1 content sits 3 px right in frame 0
    assert np.median(flow[0]) == 3.0 and np.median(flow[1]) == 0.0


def test_scene_change_lowers_consistency_in_that_chunk_only() -> None:
    rng = np.random.default_rng(14)
    scene_a, scene_b = texture(rng, 48, 64, cell=8), texture(rng, 48, 64, cell=8)
    # 4 chunks of 8 frames; the cut at frame 20 falls inside chunk 3 (frames 16..23)
    video = np.stack([noisy(rng, scene_a if t < 20 else scene_b) for t in range(32)])
    result = score_video(video, metrics=["background", "subject"], chunks=4)
    for metric in ("background", "subject"):
        scores = result.metrics[metric].chunk_scores
        others = [s for i, s in enumerate(scores) if i != 2]
        assert scores[2] < min(others) - 0.05, (metric, scores)
        assert max(others) - min(others) < 0.05, (metric, scores)


def test_every_proxy_is_labelled_and_aesthetic_is_unavailable() -> None:
    video = translating(np.random.default_rng(15), t=30)
    result = score_video(
        video, metrics=["clarity", "motion", "aesthetic", "background", "subject", "dynamic"], chunks=3, fps=16
    )
    names = result.scores()
    assert names and all(k.endswith("_proxy") for k in names)
    assert "vde_clarity" not in names and "vde_clarity_proxy" in names
    assert "vbench_subject_consistency_proxy" in names and "framepack_drift_motion_proxy" in names
    assert result.metrics["aesthetic"].unavailable and not any("aesthetic" in k for k in names)
    d = result.to_dict()
    assert d["metrics"]["clarity"]["label"] == "clarity_proxy"
    assert all(k.endswith("_proxy") for k in d["scores"])


def test_motion_smoothness_formula_with_an_exact_interpolator() -> None:
    rng = np.random.default_rng(16)
    video = rng.integers(1, 256, (9, 8, 8, 3), dtype=np.uint8)
    lookup = {video[i].tobytes(): video[i + 1] for i in range(0, 8, 2)}
    assert bm.motion_smoothness(video, lambda a, b: lookup[a.tobytes()]) == 1.0
    # an interpolator that is off by 51 grey levels everywhere scores (255 - 51) / 255
    video = video.clip(0, 204)
    lookup = {video[i].tobytes(): (video[i + 1].astype(np.int16) + 51).astype(np.uint8) for i in range(0, 8, 2)}
    assert bm.motion_smoothness(video, lambda a, b: lookup[a.tobytes()]) == pytest.approx(204 / 255)


def test_dynamic_degree_rule_with_a_synthetic_flow() -> None:
    frames = np.random.default_rng(17).integers(1, 256, (16, 64, 128, 3), dtype=np.uint8)
    threshold = 6.0 * 64 / 256  # 1.5 px

    def constant(mag: float):
        return lambda a, b: np.full((2, 8, 8), mag / np.sqrt(2))

    assert bm.dynamic_degree(frames, constant(threshold * 1.1)) == 1.0
    assert bm.dynamic_degree(frames, constant(threshold * 0.9)) == 0.0
    # below 8 fps VBench scales the threshold by 8/fps (set_params): 4 fps doubles it
    assert bm.dynamic_degree(frames, constant(threshold * 1.5), fps=4) == 0.0
    assert bm.dynamic_degree(frames, constant(threshold * 2.1), fps=4) == 1.0
    assert bm.dynamic_degree(frames, constant(threshold * 1.1), fps=24) == 1.0
    # round(4 * 16 / 16) = 4 moving pairs are needed: 3 are not enough
    calls = iter(range(100))
    few = lambda a, b: np.full((2, 8, 8), 10.0 if next(calls) < 3 else 0.0)  # noqa: E731
    assert bm.dynamic_degree(frames, few) == 0.0
