"""Incremental H.264 MP4 output that survives interruption.

Each block becomes one MP4 fragment that starts with an IDR frame and is on disk when ``write`` returns,
so a killed process leaves ``name.partial.mp4`` playable up to the last finished block. ``close()`` (also
run on exceptions and Ctrl-C through the context manager) moves it to its final name, never overwriting.
Encoding is PyAV's libx264 with ``tune=zerolatency`` (no frame delay); muxing is ``fmp4.py``.

Every stop leaves either no file or a playable one: the file is created only once the first block is
encoded, a fragment cut short (a full disk, an interrupt inside ``write``) is cut off again at close, and
publishing runs with SIGINT/SIGTERM deferred.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from inferix_core.errors import BackendUnavailableError, ConfigError, InferixError, ShapeMismatchError
from inferix_core.sinks.base import FrameSink, deferred_signals, to_uint8_frames
from inferix_core.sinks.fmp4 import FragmentedMp4Writer, Sample, avcc_from_extradata, to_length_prefixed
from inferix_core.sinks.paths import make_output_dir, next_free_path, partial_path, publish, unique_path

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
        make_output_dir(self.path.parent)
        self.temp_path = partial_path(self.path)
        self._check_temp_free()
        self._file: Any = None  # opened at the first block, so an early stop leaves no empty file
        self._good_bytes = 0  # file size after the last complete fragment: what close() keeps
        self.frames_written = 0  # frames on disk (flushed), which is what a killed run keeps
        self.frame_shape: tuple[int, int] | None = None  # (H, W) as given, before padding to even
        self._codec: Any = None
        self._writer: FragmentedMp4Writer | None = None
        self._frame_duration = 0
        self._padded = (0, 0)
        self._num_encoded = 0
        self._in_write = False  # set while a block is being encoded/written: an interrupt there leaves it set
        self._failed = False  # a write failed (disk full): nothing more is appended
        _OPEN_SINKS.add(self)

    def _check_temp_free(self) -> None:
        if self.temp_path.exists():
            raise ConfigError(
                f"{self.temp_path} exists: another run is writing {self.path.name}, or a killed run left it "
                "(it is playable; rename it). Pick another output name."
            )

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
        self._frame_duration, self._padded = frame_duration, (padded_w, padded_h)

    def _open_file(self) -> None:
        """Create the partial file and its init segment (once the first block's packets exist)."""
        for _ in range(100):  # "x": never share a temp file with another run that took the name meanwhile
            try:
                self._file = open(self.temp_path, "xb")  # noqa: SIM115 - closed in close()
                break
            except FileExistsError:
                taken = self.path
                self.path = next_free_path(self.path)
                self.temp_path = partial_path(self.path)
                logger.info("%s is being written by another run; writing %s instead", taken.name, self.path.name)
        else:  # pragma: no cover - a hundred concurrent writers of one name
            raise ConfigError(f"no free output name next to {self.path}; pick another filename_prefix")
        timescale = self.fps.numerator * 1000
        self._writer = FragmentedMp4Writer(
            self._file,
            *self._padded,
            timescale,
            self._frame_duration,
            avcc_from_extradata(bytes(self._codec.extradata)),
        )
        self._writer.write_init()
        self._good_bytes = self._file.tell()

    def _samples(self, packets: list[Any]) -> list[Sample]:
        return [Sample(to_length_prefixed(bytes(p)), bool(p.is_keyframe)) for p in packets]

    def write(self, frames: Any, block_index: int) -> None:
        """Encode one block and append it to the file as a flushed fragment."""
        if self.closed:
            raise ConfigError(f"Mp4Sink for {self.path} is closed; create a new sink for a new run.")
        if self._failed:
            raise InferixError(f"{self.temp_path.name} could not be written earlier; this sink takes no more blocks")
        array = to_uint8_frames(frames)  # (T, H, W, 3)
        height, width = array.shape[1:3]
        self._in_write = True
        if self._codec is None:
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
            frame.pts = self._num_encoded * self._frame_duration
            if t == 0 and self.keyframe_every_block:
                frame.pict_type = av.video.frame.PictureType.I
            packets.extend(self._codec.encode(frame))
            self._num_encoded += 1
        self._append(packets)
        self._in_write = False

    def _append(self, packets: list[Any]) -> None:
        """Write one fragment (creating the file first if needed); a failed write keeps what was complete."""
        try:
            if self._file is None:
                self._open_file()
            assert self._writer is not None
            if self._file.tell() != self._good_bytes:  # an earlier write was cut short: drop its bytes
                self._file.seek(self._good_bytes)
                self._file.truncate()
            self._writer.write_fragment(self._samples(packets))
        except OSError as error:  # ENOSPC, EFBIG (RLIMIT_FSIZE), EIO: the last fragment is cut off at close
            self._failed = True
            raise InferixError(
                f"could not write {self.temp_path.name} ({error.strerror or error}); the disk may be full. "
                f"The {self.frames_written} frames already written are kept as a playable file."
            ) from None
        self.frames_written = self._writer.num_samples
        self._good_bytes = self._file.tell()

    def close(self) -> None:
        """Drain the encoder, close the file and move it to its final name (kept even after an error).

        What stays is either nothing (no complete block) or a file of whole fragments under its final
        name; SIGINT/SIGTERM wait until that is settled.
        """
        if self.closed:
            return
        self.closed = True
        _OPEN_SINKS.discard(self)
        with deferred_signals():
            try:
                # the encoder's tail only belongs after a block that was written whole
                if self._codec is not None and self._file is not None and not (self._failed or self._in_write):
                    packets = list(self._codec.encode(None))
                    if packets:
                        self._append(packets)
            except InferixError as error:
                logger.warning("%s", error)
            finally:
                self._settle()

    def _settle(self) -> None:
        """Cut the file back to its last complete fragment, then publish it or remove it."""
        if self._file is None:
            return
        with contextlib.suppress(OSError):  # a full disk makes the buffered tail fail once more
            self._file.close()
        if self.frames_written == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp_path)
            logger.info("no frames were written; removed %s", self.temp_path)
            return
        try:
            if self.temp_path.stat().st_size != self._good_bytes:
                os.truncate(self.temp_path, self._good_bytes)
                logger.warning("cut %s back to its last complete block", self.temp_path.name)
            self.path = publish(self.temp_path, self.path)
        except OSError as error:
            logger.error("could not publish %s (%s); removed it rather than leave a partial file", self.path, error)
            with contextlib.suppress(OSError):
                os.unlink(self.temp_path)
            return
        logger.info("wrote %d frames to %s", self.frames_written, self.path)


_OPEN_SINKS: weakref.WeakSet[Mp4Sink] = weakref.WeakSet()


def close_open_sinks() -> None:
    """Close every Mp4Sink still open (the CLI calls this on its way out, e.g. after a second Ctrl-C)."""
    for sink in list(_OPEN_SINKS):
        try:
            sink.close()
        except Exception as error:  # keep closing the others
            logger.error("closing %s failed: %s", sink.path, error)
