"""Core ComfyUI's `VIDEO` type from our frames, so core Save Video / Get Video Components / Preview take them.

Inside ComfyUI (v0.3.64 and v0.27 alike) a VIDEO is a `comfy_api` `VideoInput`; we build
`InputImpl.VideoFromComponents(Types.VideoComponents(images, frame_rate))` from the exact frames (an IMAGE
batch) and the model's fps, so Get Video Components gives back the frames bit for bit and Save Video encodes
them itself. Headless (`inferix run`, no comfy_api) the same reading methods are offered by `HeadlessVideo`,
which only holds the frames: nothing headless consumes a VIDEO except tests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

log = logging.getLogger(__name__)

try:
    from comfy_api.latest import InputImpl, Types

    HAVE_CORE_VIDEO = True
except ImportError:  # headless, or a ComfyUI without the V3 API
    InputImpl = Types = None
    HAVE_CORE_VIDEO = False


@dataclass(frozen=True)
class HeadlessComponents:
    """The fields of comfy_api's VideoComponents that a reader uses."""

    images: Any
    frame_rate: Fraction
    audio: Any = None
    metadata: dict | None = None


@dataclass(frozen=True)
class HeadlessVideo:
    """A VIDEO without ComfyUI: the frames [T, H, W, 3] in 0..1 and their rate, read like a VideoInput."""

    components: HeadlessComponents

    def get_components(self) -> HeadlessComponents:
        return self.components

    def get_dimensions(self) -> tuple[int, int]:
        _, height, width, _ = self.components.images.shape
        return width, height

    def get_duration(self) -> float:
        return len(self.components.images) / float(self.components.frame_rate)


def fps_fraction(fps: float) -> Fraction:
    """16 → 16, 29.97 → 2997/100: an exact frame rate as containers want it (fps must be positive)."""
    if not fps or fps <= 0:
        raise ValueError(f"a video needs a positive frame rate, got {fps}")
    return Fraction(fps).limit_denominator(1001)


def core_video(images: Any, fps: float) -> Any:
    """A core VIDEO of an IMAGE batch `images` [T, H, W, 3] (float, 0..1) at `fps` frames per second."""
    rate = fps_fraction(fps)
    if HAVE_CORE_VIDEO:
        return InputImpl.VideoFromComponents(Types.VideoComponents(images=images, frame_rate=rate))
    return HeadlessVideo(HeadlessComponents(images=images, frame_rate=rate))
