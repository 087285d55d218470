"""Incremental H.264 MP4 output that survives interruption.

Each block becomes one MP4 fragment that starts with an IDR frame and is on disk when ``write`` returns,
so a killed process leaves ``name.partial.mp4`` playable up to the last finished block. ``close()`` (also
run on exceptions and Ctrl-C through the context manager) moves it to its final name, never overwriting.
Encoding is PyAV's libx264 with ``tune=zerolatency`` (no frame delay); muxing is ``fmp4.py``.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from inferix_core.errors import BackendUnavailableError, ConfigError, ShapeMismatchError
from inferix_core.sinks.base import FrameSink, to_uint8_frames
from inferix_core.sinks.fmp4 import FragmentedMp4Writer, Sample, avcc_from_extradata, to_length_prefixed
from inferix_core.sinks.paths import partial_path, publish, unique_path

logger = logging.getLogger(__name__)

__all__ = ["Mp4Sink", "unique_path"]


class Mp4Sink(FrameSink):
    """Encode blocks to ``path`` as fragmented H.264 MP4, one flushed fragment per block.

    Args:
        path: final file name; it must not exist yet (use ``unique_path(dir, prefix, "mp4")``).
        fps: playback frame rate (frames per second); fractional rates like 24000/1001 are kept exact.
        crf: x264 constant rate factor, 0 (lossless) to 51; 18 is visually near-lossless.
        preset: x264 speed preset; faster presets keep encoding well below block generation time.
        keyframe_every_block: start every block with an IDR frame, so each fragment decodes on its own.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float | Fraction = 16.0,
        *,
        crf: int = 18,
        preset: str = "veryfast",
        keyframe_every_block: bool = True,
    ):
        self.path = Path(path)
        if self.path.exists():
            raise ConfigError(
                f"{self.path} already exists and Inferix never overwrites outputs. Choose another name or use "
                f"unique_path({str(self.path.parent)!r}, {self.path.stem!r}, 'mp4') for the next free number."
            )
        if fps <= 0:
            raise ConfigError(f"fps must be positive, got {fps}.")
        if not 0 <= crf <= 51:
            raise ConfigError(f"crf must be in [0, 51] (x264), got {crf}.")
        if "libx264" not in av.codecs_available:
            raise BackendUnavailableError(
                "PyAV was built without libx264; install the PyPI 'av' wheel (it bundles it)."
            )
        self.fps = Fraction(fps).limit_denominator(1001)
        self.crf, self.preset, self.keyframe_every_block = crf, preset, keyframe_every_block
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.temp_path = partial_path(self.path)
        try:  # "x": fail rather than share a temp file with another run writing the same name
            self._file = open(self.temp_path, "xb")  # noqa: SIM115 - closed in close()
        except FileExistsError as error:
            raise ConfigError(
                f"{self.temp_path} exists: another run is writing {self.path.name}, or a killed run left it "
                "(it is playable; rename it). Pick another output name."
            ) from error
        self.frames_written = 0  # frames on disk (flushed), which is what a killed run keeps
        self.frame_shape: tuple[int, int] | None = None  # (H, W) as given, before padding to even
        self._codec: Any = None
        self._writer: FragmentedMp4Writer | None = None
        self._num_encoded = 0

    def _open_encoder(self, height: int, width: int) -> None:
        """Set up libx264 and the MP4 init segment for the first block's size (padded to even)."""
        self.frame_shape = (height, width)
        padded_h, padded_w = height + height % 2, width + width % 2
        if (padded_h, padded_w) != (height, width):
            logger.info("padding %dx%d frames to %dx%d for yuv420p", width, height, padded_w, padded_h)
        codec = av.CodecContext.create("libx264", "w")
        codec.width, codec.height, codec.pix_fmt = padded_w, padded_h, "yuv420p"
        # 1000 ticks per frame period keeps 24000/1001-style rates exact in 32-bit sample durations.
        timescale, frame_duration = self.fps.numerator * 1000, self.fps.denominator * 1000
        codec.time_base = Fraction(1, timescale)
        codec.framerate = self.fps
        codec.options = {
            "preset": self.preset,
            "tune": "zerolatency",  # no lookahead or B-frames: every frame's packet comes out immediately
            "crf": str(self.crf),
            "forced-idr": "1",
            # swscale converts RGB with the BT.601 matrix; say so in the VUI so browsers decode it the same way
            "x264-params": "colormatrix=smpte170m",
        }
        codec.flags |= av.codec.context.Flags.global_header  # SPS/PPS in extradata, for the avcC box
        codec.open()
        self._codec = codec
        self._writer = FragmentedMp4Writer(
            self._file, padded_w, padded_h, timescale, frame_duration, avcc_from_extradata(bytes(codec.extradata))
        )
        self._writer.write_init()

    def _samples(self, packets: list[Any]) -> list[Sample]:
        return [Sample(to_length_prefixed(bytes(p)), bool(p.is_keyframe)) for p in packets]

    def write(self, frames: Any, block_index: int) -> None:
        """Encode one block and append it to the file as a flushed fragment."""
        if self.closed:
            raise ConfigError(f"Mp4Sink for {self.path} is closed; create a new sink for a new run.")
        array = to_uint8_frames(frames)  # (T, H, W, 3)
        height, width = array.shape[1:3]
        if self._writer is None:
            self._open_encoder(height, width)
        elif (height, width) != self.frame_shape:
            raise ShapeMismatchError(
                f"block {block_index} has {width}x{height} frames but the video is {self.frame_shape[1]}x"
                f"{self.frame_shape[0]}; all blocks of one video must share a size."
            )
        if height % 2 or width % 2:  # replicate the last row/column rather than add a black line
            array = np.pad(array, ((0, 0), (0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        packets = []
        for t, rgb in enumerate(array):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame.pts = self._num_encoded * self._writer.frame_duration
            if t == 0 and self.keyframe_every_block:
                frame.pict_type = av.video.frame.PictureType.I
            packets.extend(self._codec.encode(frame))
            self._num_encoded += 1
        self._writer.write_fragment(self._samples(packets))
        self.frames_written = self._writer.num_samples

    def close(self) -> None:
        """Drain the encoder, close the file and move it to its final name (kept even after an error)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._codec is not None and self._writer is not None:
                self._writer.write_fragment(self._samples(list(self._codec.encode(None))))
                self.frames_written = self._writer.num_samples
        finally:
            self._file.close()
            if self.frames_written == 0:
                os.unlink(self.temp_path)
                logger.info("no frames were written; removed %s", self.temp_path)
            else:
                self.path = publish(self.temp_path, self.path)
                logger.info("wrote %d frames to %s", self.frames_written, self.path)
