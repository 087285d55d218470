"""nodes/core_video: our frames as a core VIDEO (headless stand-in here; the real one in tests/integration)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from inferix_nodes.core_video import core_video, fps_fraction


def test_frame_rates_are_exact_fractions():
    assert fps_fraction(16) == 16 and fps_fraction(29.97) == Fraction(2997, 100)
    assert fps_fraction(30000 / 1001) == Fraction(30000, 1001)
    with pytest.raises(ValueError, match="positive frame rate"):
        fps_fraction(0)


def test_headless_video_reads_like_a_core_video():
    images = torch.rand(13, 24, 40, 3)
    video = core_video(images, 16.0)
    parts = video.get_components()
    assert parts.images is images and parts.frame_rate == 16 and parts.audio is None
    assert video.get_dimensions() == (40, 24)
    assert video.get_duration() == pytest.approx(13 / 16)
