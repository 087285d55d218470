"""Numbered image frames in a folder (PNG lossless, or WebP), one file per pixel frame.

Each file is written under a temp name and then published, so a reader never sees a half-written image
and an existing file is never replaced. This sink does not resize or colour-convert.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from PIL import Image

from inferix_core.errors import ConfigError
from inferix_core.sinks.base import FrameSink, to_uint8_frames
from inferix_core.sinks.paths import NUMBER_DIGITS, partial_path, publish

logger = logging.getLogger(__name__)

FORMATS = {"png": "PNG", "webp": "WEBP"}


class FrameFolderSink(FrameSink):
    """Write ``directory/prefix_00000.png`` … numbered by frame index across the whole run.

    Args:
        directory: created if missing; must not already hold ``prefix_*.ext`` files.
        prefix: file name prefix.
        ext: ``"png"`` (lossless) or ``"webp"``.
        quality: WebP quality 1-100 (ignored for PNG); ``lossless=True`` WebP when 100.
    """

    def __init__(self, directory: str | os.PathLike[str], prefix: str = "frame", ext: str = "png", quality: int = 90):
        ext = ext.lower().lstrip(".")
        if ext not in FORMATS:
            raise ConfigError(f"frame format {ext!r} is not supported; expected one of {sorted(FORMATS)}.")
        if not 1 <= quality <= 100:
            raise ConfigError(f"quality must be in [1, 100], got {quality}.")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        clashes = sorted(self.directory.glob(f"{prefix}_*.{ext}"))
        if clashes:
            raise ConfigError(
                f"{self.directory} already holds {len(clashes)} '{prefix}_*.{ext}' frames (e.g. {clashes[0].name}) "
                "and Inferix never overwrites outputs. Use an empty folder or another prefix."
            )
        self.prefix, self.ext, self.quality = prefix, ext, quality
        self.frames_written = 0
        self.paths: list[Path] = []

    def _save_options(self) -> dict[str, Any]:
        if self.ext == "webp":
            return {"quality": self.quality, "lossless": self.quality == 100, "method": 4}
        return {"compress_level": 1}  # fast: frames arrive at generation speed

    def write(self, frames: Any, block_index: int) -> None:
        """Save each frame of the block as the next numbered file."""
        for frame in to_uint8_frames(frames):  # (H, W, 3)
            final = self.directory / f"{self.prefix}_{self.frames_written:0{NUMBER_DIGITS}d}.{self.ext}"
            temp = partial_path(final)
            with open(temp, "xb") as file:
                Image.fromarray(frame).save(file, format=FORMATS[self.ext], **self._save_options())
            self.paths.append(publish(temp, final))
            self.frames_written += 1

    def close(self) -> None:
        """Nothing is buffered; logs the count."""
        if not self.closed:
            self.closed = True
            logger.info("wrote %d frames to %s", self.frames_written, self.directory)
