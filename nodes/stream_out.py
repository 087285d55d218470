"""InferixStreamOut: show a generated video in the node and list it as an output; encode it only if needed.

When Block Denoise streamed the video (Stream Settings connected), the mp4 is already in the output folder,
written block by block while it ran: this node publishes that file as it is, no re-encode. For a video
that was not streamed, or any IMAGE batch, it encodes through the core's sinks (`Mp4Sink` writes
`name.partial.mp4` and renames it when done, never overwriting).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from inferix_core.errors import ConfigError

from . import comfy_runtime as rt
from . import types
from .compat import io
from .core_video import as_inferix_video
from .stream_settings import FRAME_FORMATS, check_prefix, output_entry, split_prefix

log = logging.getLogger(__name__)


def block_chunks(frames: Any, block_sizes: list[int] | None) -> list[Any]:
    """Split [T, H, W, 3] frames into the blocks they were generated in (one chunk when unknown)."""
    if not block_sizes or sum(block_sizes) != len(frames):
        return [frames]
    chunks, start = [], 0
    for size in block_sizes:
        chunks.append(frames[start : start + size])
        start += size
    return chunks


def streamed_file(video: Any) -> Path | None:
    """The mp4 Block Denoise streamed this video to, if it is in the output folder and still there."""
    for path in getattr(video, "files", ()) or ():
        if str(path).endswith(".mp4") and Path(path).is_file() and output_entry(path) is not None:
            return Path(path)
    return None


class InferixStreamOut(io.ComfyNode):
    """Shows the video in the node and reports it as an output file (written while generating, or here)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixStreamOut",
            display_name="Inferix Stream Out",
            category=f"{types.CATEGORY}/output",
            description="Plays the video here and lists it as an output. With Inferix Stream Settings on Block "
            "Denoise the mp4 was already written block by block while generating, and is shown as "
            "is; otherwise this node saves it (fragmented mp4, never overwriting). While Block "
            "Denoise runs, this node also shows its live block previews.",
            is_output_node=True,
            inputs=[
                types.VideoIn.Input(
                    "video",
                    optional=True,
                    tooltip="Block Denoise's video or core_video (both carry its fps, blocks and the streamed "
                    "file), or any core VIDEO.",
                ),
                io.Image.Input(
                    "images",
                    optional=True,
                    tooltip="Or any IMAGE batch, one image per frame (used when video is not "
                    "connected); always encoded here.",
                ),
                io.Float.Input(
                    "fps",
                    default=16.0,
                    min=1.0,
                    max=120.0,
                    step=1.0,
                    tooltip="Frame rate for an IMAGE batch; a connected video keeps its own fps.",
                ),
                io.String.Input(
                    "filename_prefix",
                    default="inferix/video",
                    tooltip="File name prefix under the output folder when this node encodes; a "
                    "number is appended (video_00001.mp4). Ignored for a streamed video "
                    "(its name comes from Stream Settings).",
                ),
                io.Combo.Input(
                    "save_frames",
                    options=FRAME_FORMATS,
                    default="none",
                    tooltip="When this node encodes: also save every frame as PNG (lossless) or "
                    "WebP into a folder named after the video.",
                ),
                io.Int.Input(
                    "crf",
                    default=18,
                    min=0,
                    max=51,
                    step=1,
                    tooltip="When this node encodes, H.264 quality: 0 lossless, 18 visually "
                    "near-lossless, 28 small files.",
                ),
            ],
            outputs=[],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        return check_prefix(filename_prefix)

    @classmethod
    def execute(
        cls, fps: float, filename_prefix: str, save_frames: str, crf: int, video: Any = None, images: Any = None
    ) -> io.NodeOutput:
        from inferix_core.api import open_video_sinks
        from inferix_core.sinks import MultiSink

        if video is None and images is None:
            raise ConfigError("Inferix Stream Out has nothing to save: connect 'video' or 'images'")
        video = as_inferix_video(video)
        final = streamed_file(video) if video is not None else None
        if final is not None:
            log.info("showing %s, streamed while generating", final)
        else:
            if video is not None:
                blocks = [b["num_frames"] for b in (video.profile or {}).get("blocks", [])]
                frames, fps = video.frames, float(video.fps)
            else:
                frames, blocks = (images.clamp(0, 1) * 255).round().byte(), None
            sinks = open_video_sinks(*split_prefix(filename_prefix), fps, crf=crf, frames_ext=save_frames)
            with MultiSink(sinks) as sink:
                for index, chunk in enumerate(block_chunks(frames, blocks)):
                    sink.write(chunk, index)
                    rt.check_interrupt()
            final = sinks[0].path  # the name actually used: publish() moves on to the next number if taken
            log.info("saved %s (%d frames at %.3g fps)", final, len(frames), fps)
        return io.NodeOutput(ui={"images": [output_entry(final)], "animated": [True]})
