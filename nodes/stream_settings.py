"""InferixStreamSettings: where Block Denoise streams its mp4 while it generates; emits `StreamSettings`.

In ComfyUI a node runs only after its inputs are complete, so an output node downstream of Block Denoise
cannot write frames as they are produced. This settings node hands Block Denoise the file settings
instead; Block Denoise writes the mp4 block by block (the core's sinks) and Stream Out shows that file.
It only checks and carries the settings: naming, encoding and publishing are `inferix_core.sinks`'.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from inferix_core.errors import ConfigError

from . import comfy_runtime as rt
from . import types
from .compat import io

log = logging.getLogger(__name__)

FRAME_FORMATS = ["none", "png", "webp"]


@dataclass(frozen=True)
class StreamSettings:
    """Where and how to stream: a prefix under the output folder, fps (0 = the model's), x264 crf, frames.

    A node-side type (not core) because `filename_prefix` is relative to ComfyUI's output folder.
    """

    filename_prefix: str = "inferix/video"
    fps: float = 0.0
    crf: int = 18
    save_frames: str = "none"

    def __post_init__(self) -> None:
        if not self.filename_prefix.strip():
            raise ConfigError("filename_prefix is empty; use something like 'inferix/video'")
        if self.fps < 0:
            raise ConfigError(f"fps must be 0 (the model's frame rate) or positive, got {self.fps}")
        if not 0 <= self.crf <= 51:
            raise ConfigError(f"crf must be between 0 and 51 (x264), got {self.crf}")
        if self.save_frames not in FRAME_FORMATS:
            raise ConfigError(f"save_frames must be one of {FRAME_FORMATS}, got '{self.save_frames}'")


def split_prefix(filename_prefix: str) -> tuple[Path, str]:
    """'inferix/clip' → (<output>/inferix, 'clip'); refuses prefixes that leave the output folder."""
    from inferix_core.sinks.paths import confine_prefix

    return confine_prefix(rt.output_dir(), filename_prefix)


def check_prefix(filename_prefix: str | None) -> bool | str:
    """validate_inputs helper: True, or why the prefix is refused."""
    if filename_prefix is None:
        return True
    if not filename_prefix.strip():
        return "filename_prefix is empty; use something like 'inferix/video'"
    try:
        split_prefix(filename_prefix)
    except ConfigError as exc:
        return str(exc)
    return True


def output_entry(path: str | Path) -> dict[str, str] | None:
    """{filename, subfolder, type: 'output'} for ComfyUI's /view, or None when `path` is not under the output folder."""
    root, final = rt.output_dir().resolve(), Path(path).resolve()
    if root not in final.parents:
        return None
    subfolder = str(final.parent.relative_to(root))
    return {"filename": final.name, "subfolder": "" if subfolder == "." else subfolder, "type": "output"}


class InferixStreamSettings(io.ComfyNode):
    """Settings for the mp4 that Block Denoise writes while it generates."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixStreamSettings",
            display_name="Inferix Stream Settings",
            category=f"{types.CATEGORY}/output",
            description="Connect to Block Denoise's 'stream' input: it then writes the video to the output folder "
            "block by block while generating (a fragmented mp4, flushed per block), so a stopped run "
            "keeps a playable file of the frames so far. Stream Out shows that file.",
            inputs=[
                io.String.Input(
                    "filename_prefix",
                    default="inferix/video",
                    tooltip="File name prefix under the output folder; a number is appended "
                    "(video_00001.mp4). Subfolders are allowed. Existing files are never "
                    "overwritten.",
                ),
                io.Float.Input(
                    "fps",
                    default=0.0,
                    min=0.0,
                    max=120.0,
                    step=1.0,
                    tooltip="Playback frame rate in frames per second; 0 = the model's own rate "
                    "(16 for Wan-based models).",
                ),
                io.Int.Input(
                    "crf",
                    default=18,
                    min=0,
                    max=51,
                    step=1,
                    tooltip="H.264 quality: 0 lossless, 18 visually near-lossless, 28 small files.",
                ),
                io.Combo.Input(
                    "save_frames",
                    options=FRAME_FORMATS,
                    default="none",
                    tooltip="Also save every frame as PNG (lossless) or WebP into a folder named after the video.",
                ),
            ],
            outputs=[types.StreamSettings.Output("stream", tooltip="For the 'stream' input of Inferix Block Denoise.")],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        return check_prefix(filename_prefix)

    @classmethod
    def execute(cls, filename_prefix: str, fps: float, crf: int, save_frames: str) -> io.NodeOutput:
        return io.NodeOutput(StreamSettings(filename_prefix, fps, crf, save_frames))
