"""Core ComfyUI's `VIDEO` type from our frames, so core Save Video / Get Video Components / Preview take them.

Inside ComfyUI (v0.3.64 and v0.27 alike) a VIDEO is a `comfy_api` `VideoInput`; we build
`InputImpl.VideoFromComponents(Types.VideoComponents(images, frame_rate))` from the exact frames (an IMAGE
batch) and the model's fps, so Get Video Components gives back the frames bit for bit and Save Video encodes
them itself. Headless (`inferix run`, no comfy_api) the same reading methods are offered by `HeadlessVideo`,
which only holds the frames.

Our video inputs take either type (`types.VideoIn`): `as_inferix_video` gives back the VideoResult a core
VIDEO was made from (Block Denoise hangs it on the VIDEO, so the streamed mp4 and the profile carry over),
or, for a VIDEO from any other node, rebuilds the frames and fps from its components.
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


RESULT_ATTR = "_inferix_video"  # on a core VIDEO we made: the VideoResult it shows (stream files, profile)


@dataclass(frozen=True)
class RebuiltVideo:
    """The fields of a VideoResult that the video-reading nodes use, rebuilt from a core VIDEO."""

    frames: Any  # uint8 [T, H, W, 3]
    fps: float
    profile: dict | None = None
    files: tuple[str, ...] = ()


def core_video(images: Any, fps: float, result: Any = None) -> Any:
    """A core VIDEO of an IMAGE batch `images` [T, H, W, 3] (float, 0..1) at `fps` frames per second.

    `result` (the VideoResult the frames came from) rides along, for `as_inferix_video`.
    """
    rate = fps_fraction(fps)
    if HAVE_CORE_VIDEO:
        video = InputImpl.VideoFromComponents(Types.VideoComponents(images=images, frame_rate=rate))
    else:
        video = HeadlessVideo(HeadlessComponents(images=images, frame_rate=rate))
    if result is not None:
        object.__setattr__(video, RESULT_ATTR, result)  # HeadlessVideo is frozen; this is no field of it
    return video


def as_inferix_video(video: Any) -> Any:
    """An INFERIX_VIDEO (VideoResult) as is; a core VIDEO as the VideoResult it came from, else rebuilt.

    A rebuilt video has the frames (uint8) and frame rate of the VIDEO's components, no profile and no
    streamed file: Stream Out encodes it, Profile Report says it carries no profile.
    """
    if video is None or hasattr(video, "frames"):
        return video
    carried = getattr(video, RESULT_ATTR, None)
    if carried is not None:
        return carried
    if not callable(getattr(video, "get_components", None)):
        from inferix_core.errors import ConfigError

        raise ConfigError(f"expected a video (INFERIX_VIDEO or VIDEO), got {type(video).__name__}")
    parts = video.get_components()
    frames = (parts.images.clamp(0, 1) * 255).round().byte().cpu().numpy()
    return RebuiltVideo(frames=frames, fps=float(parts.frame_rate))
