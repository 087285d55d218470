"""Closed-form checks of VDE, its weights, chunk trimming and FramePack's start-end windows."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.metrics import (
    chunk_bounds,
    drift_weights,
    split_chunks,
    start_end_bounds,
    start_end_contrast,
    to_uint8_frames,
    vde,
)


def test_linear_vde_closed_form() -> None:
    # N = 4: w = 3, 2, 1; |m_i - m_1| / m_1 = 0.5, 0.5, 0
    assert vde([2.0, 3.0, 1.0, 2.0]) == pytest.approx(3 * 0.5 + 2 * 0.5 + 1 * 0.0)


def test_log_vde_closed_form() -> None:
    # w = ln 3, ln 2, ln 1 = 0: the last chunk never counts
    assert vde([2.0, 3.0, 1.0, 100.0], "log") == pytest.approx(math.log(3) * 0.5 + math.log(2) * 0.5)


def test_vde_matches_an_independent_formula_on_random_scores() -> None:
    rng = np.random.default_rng(1)
    for n in (2, 5, 10, 17):
        m = rng.uniform(0.1, 2.0, n)
        i = np.arange(2, n + 1)
        expected_lin = np.sum((n - i + 1) * np.abs(m[1:] - m[0]) / m[0])
        expected_log = np.sum(np.log(n - i + 1) * np.abs(m[1:] - m[0]) / m[0])
        assert vde(m.tolist()) == pytest.approx(expected_lin, rel=1e-12)
        assert vde(m.tolist(), "log") == pytest.approx(expected_log, rel=1e-12)


def test_vde_is_not_normalised_by_the_weight_sum() -> None:
    assert vde([1.0, 2.0, 2.0]) == pytest.approx(2 * 1.0 + 1 * 1.0)
    assert sum(drift_weights(3)) == 3.0


def test_vde_edge_cases() -> None:
    assert vde([]) == 0.0
    assert vde([0.7]) == 0.0
    assert vde([0.0, 0.3, 0.5]) == math.inf
    assert vde([0.4, 0.4, 0.4, 0.4]) == 0.0
    with pytest.raises(ConfigError, match="linear"):
        vde([1.0, 2.0], "quadratic")


def test_drift_weights() -> None:
    assert drift_weights(5) == [4.0, 3.0, 2.0, 1.0]
    assert drift_weights(4, "log") == pytest.approx([math.log(3), math.log(2), 0.0])
    assert drift_weights(1) == []


def test_chunking_drops_the_remainder_at_the_end() -> None:
    assert chunk_bounds(23, 4) == [(0, 5), (5, 10), (10, 15), (15, 20)]
    frames = np.random.default_rng(2).integers(1, 256, (23, 4, 5, 3), dtype=np.uint8)
    chunks = split_chunks(frames, 4)
    assert [len(c) for c in chunks] == [5, 5, 5, 5]
    np.testing.assert_array_equal(np.concatenate(chunks), frames[:20])


def test_chunking_skips_short_videos_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    frames = np.random.default_rng(3).integers(1, 256, (7, 4, 4, 3), dtype=np.uint8)
    with caplog.at_level(logging.WARNING):
        assert split_chunks(frames, 10) is None
    assert "fewer than 10 chunks" in caplog.text
    with pytest.raises(ConfigError):
        chunk_bounds(10, 0)


def test_start_end_windows_are_15_percent() -> None:
    start, end = start_end_bounds(100)
    assert (start, end) == (range(0, 15), range(85, 100))
    assert start_end_bounds(10, min_frames=3) == (range(0, 3), range(7, 10))
    assert start_end_contrast(0.8, 0.5) == pytest.approx(0.3)


def test_frame_conversion() -> None:
    rng = np.random.default_rng(4)
    u8 = rng.integers(0, 256, (3, 4, 5, 3), dtype=np.uint8)
    as_float = torch.from_numpy(u8.astype(np.float32) / 255.0)
    np.testing.assert_array_equal(to_uint8_frames(as_float), u8)
    np.testing.assert_array_equal(to_uint8_frames(torch.from_numpy(u8)), u8)
    with pytest.raises(ShapeMismatchError):
        to_uint8_frames(u8[..., 0])
