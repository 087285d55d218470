"""InferixStreamOut: save a generated video as MP4 (and optionally numbered frames) and play it in the node.

Frames go to the core sinks one block at a time (`Mp4Sink` writes `name.partial.mp4` and renames it
when done, never overwriting). Encoding, naming and publishing are the sinks' business, not ours.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from inferix_core.errors import ConfigError

from . import comfy_runtime as rt
from . import types
from .compat import io

log = logging.getLogger(__name__)

FRAME_FORMATS = ["none", "png", "webp"]


def split_prefix(filename_prefix: str) -> tuple[Path, str]:
    """'inferix/clip' → (<output>/inferix, 'clip'); refuses prefixes that leave the output folder."""
    root = rt.output_dir().resolve()
    target = (root / filename_prefix).resolve()
    if root != target and root not in target.parents:
        raise ConfigError(f"filename_prefix '{filename_prefix}' points outside the output folder {root}; "
                          "use a relative prefix such as 'inferix/video'")
    return target.parent, target.name


def block_chunks(frames: Any, block_sizes: list[int] | None) -> list[Any]:
    """Split [T, H, W, 3] frames into the blocks they were generated in (one chunk when unknown)."""
    if not block_sizes or sum(block_sizes) != len(frames):
        return [frames]
    chunks, start = [], 0
    for size in block_sizes:
        chunks.append(frames[start:start + size])
        start += size
    return chunks


class InferixStreamOut(io.ComfyNode):
    """Writes the video to the output folder block by block and shows it in the node."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixStreamOut",
            display_name="Inferix Stream Out",
            category=f"{types.CATEGORY}/output",
            description="Saves an MP4 under ComfyUI's output folder (fragmented, one fragment per block, never "
                        "overwriting) and plays it here. While Block Denoise runs, this node also shows "
                        "its live block previews.",
            is_output_node=True,
            inputs=[
                types.Video.Input("video", optional=True,
                                  tooltip="The result of Inferix Block Denoise (carries its fps and blocks)."),
                io.Image.Input("images", optional=True,
                               tooltip="Or any IMAGE batch, one image per frame (used when video is not "
                                       "connected)."),
                io.Float.Input("fps", default=16.0, min=1.0, max=120.0, step=1.0,
                               tooltip="Frame rate for an IMAGE batch; a connected video keeps its own fps."),
                io.String.Input("filename_prefix", default="inferix/video",
                                tooltip="File name prefix under the output folder; a number is appended "
                                        "(video_00001.mp4). Subfolders are allowed."),
                io.Combo.Input("save_frames", options=FRAME_FORMATS, default="none",
                               tooltip="Also save every frame as PNG (lossless) or WebP into a folder named "
                                       "after the video."),
                io.Int.Input("crf", default=18, min=0, max=51, step=1,
                             tooltip="H.264 quality: 0 lossless, 18 visually near-lossless, 28 small files."),
            ],
            outputs=[],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        if filename_prefix is not None:
            if not filename_prefix.strip():
                return "filename_prefix is empty; use something like 'inferix/video'"
            try:
                split_prefix(filename_prefix)
            except ConfigError as exc:
                return str(exc)
        return True

    @classmethod
    def execute(cls, fps: float, filename_prefix: str, save_frames: str, crf: int, video: Any = None,
                images: Any = None) -> io.NodeOutput:
        from inferix_core.sinks import Mp4Sink, MultiSink, unique_path
        from inferix_core.sinks.frames import FrameFolderSink

        if video is None and images is None:
            raise ConfigError("Inferix Stream Out has nothing to save: connect 'video' or 'images'")
        if video is not None:
            blocks = [b["num_frames"] for b in (video.profile or {}).get("blocks", [])]
            frames, fps = video.frames, float(video.fps)
        else:
            frames, blocks = (images.clamp(0, 1) * 255).round().byte(), None
        folder, prefix = split_prefix(filename_prefix)
        path = unique_path(folder, prefix, "mp4")
        sinks = [Mp4Sink(path, fps, crf=crf)]
        if save_frames != "none":
            sinks.append(FrameFolderSink(folder / path.stem, prefix="frame", ext=save_frames))
        with MultiSink(sinks) as sink:
            for index, chunk in enumerate(block_chunks(frames, blocks)):
                sink.write(chunk, index)
                rt.check_interrupt()
        final = sinks[0].path  # the name actually used: publish() moves on to the next number if taken
        subfolder = str(final.parent.relative_to(rt.output_dir().resolve()))
        entry = {"filename": final.name, "subfolder": "" if subfolder == "." else subfolder, "type": "output"}
        log.info("saved %s (%d frames at %.3g fps)", final, len(frames), fps)
        return io.NodeOutput(ui={"images": [entry], "animated": [True]})
