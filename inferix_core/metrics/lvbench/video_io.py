"""Read videos for LV-Bench scoring: an mp4 (or other container) through imageio's pyav plugin, or a
folder of PNG/JPEG frames in name order. Writing video is the sinks' business, not this module's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image

from ...errors import MissingFileError, ShapeMismatchError

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".gif")
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg")


def _natural_key(p: Path) -> list:
    """frame_2.png sorts before frame_10.png."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def _frame_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_natural_key)


def find_videos(path: str | Path) -> list[Path]:
    """The videos named by a CLI argument: a file, a folder of frames, or a folder of videos/frame folders."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingFileError(f"'{path}' is neither a video file nor a folder.")
    videos = sorted((p for p in path.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES), key=_natural_key)
    if videos:
        return videos
    if _frame_files(path):
        return [path]
    folders = sorted((p for p in path.iterdir() if p.is_dir() and _frame_files(p)), key=_natural_key)
    if not folders:
        raise MissingFileError(f"'{path}' has no videos ({', '.join(VIDEO_SUFFIXES)}) and no PNG/JPEG frames.")
    return folders


def read_video(path: str | Path) -> tuple[np.ndarray, float | None]:
    """(frames uint8 [T, H, W, 3], fps or None) from a video file or a folder of frames."""
    path = Path(path)
    if path.is_dir():
        files = _frame_files(path)
        if not files:
            raise MissingFileError(f"Frame folder '{path}' has no PNG/JPEG files.")
        frames = [np.asarray(Image.open(f).convert("RGB")) for f in files]
        if len({f.shape for f in frames}) != 1:
            raise ShapeMismatchError(f"Frames in '{path}' differ in size: {sorted({f.shape for f in frames})}.")
        return np.stack(frames), None
    if not path.is_file():
        raise MissingFileError(f"Video '{path}' not found.")
    import imageio.v3 as iio

    frames = iio.imread(path, plugin="pyav")  # (T, H, W, 3) uint8
    fps = iio.immeta(path, plugin="pyav").get("fps")
    if frames.ndim == 3:  # a single-frame file
        frames = frames[None]
    return np.ascontiguousarray(frames[..., :3]), float(fps) if fps else None
