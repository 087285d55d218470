"""InferixProfileReport and InferixLVBenchScore: read a finished video's timings or quality as text.

The measurements and their text layout are `inferix_core.profiling`'s (ProfileReport, format_profile) and the scores `inferix_core.metrics.lvbench`'s;
these nodes only choose inputs and pass the metric weights folder.
"""

from __future__ import annotations

import logging
from typing import Any

from inferix_core.metrics.lvbench import DEFAULT_METRICS, METRICS

from . import comfy_runtime as rt
from . import types
from .compat import io
from .core_video import as_inferix_video

log = logging.getLogger(__name__)

METRIC_SETS = {"published (5 VDE metrics)": DEFAULT_METRICS, "all (with dynamic degree)": METRICS}


class InferixProfileReport(io.ComfyNode):
    """Per-block timing and memory of a generation, as a table."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixProfileReport",
            display_name="Inferix Profile Report",
            category=f"{types.CATEGORY}/analysis",
            description="Where the time went: denoise, context pass and decode per block, throughput in frames "
            "per second, and peak KV-cache memory.",
            is_output_node=True,
            inputs=[types.VideoIn.Input("video", tooltip="Block Denoise's video or core_video, or any core VIDEO.")],
            outputs=[io.String.Output("report", tooltip="The profile as plain text.")],
        )

    @classmethod
    def execute(cls, video: Any) -> io.NodeOutput:
        from inferix_core.errors import ConfigError
        from inferix_core.profiling import ProfileReport, format_profile

        video = as_inferix_video(video)
        if not video.profile:
            raise ConfigError("this video carries no profile; generate it with Inferix Block Denoise")
        text = format_profile(ProfileReport.from_dict(video.profile))
        return io.NodeOutput(text, ui={"text": [text]})


class InferixLVBenchScore(io.ComfyNode):
    """LV-Bench quality and drift (VDE) scores of a video."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixLVBenchScore",
            display_name="Inferix LV-Bench Score",
            category=f"{types.CATEGORY}/analysis",
            description="Scores a long video as LV-Bench does: VBench-style clarity, motion, aesthetic, "
            "background and subject scores over equal chunks and their drift (VDE). Metrics whose "
            "networks are not in models/inferix_metrics use labelled weight-free proxies.",
            is_output_node=True,
            inputs=[
                types.VideoIn.Input(
                    "video", optional=True, tooltip="Block Denoise's video or core_video, or any core VIDEO."
                ),
                io.Image.Input("images", optional=True, tooltip="Or any IMAGE batch (one image per frame)."),
                io.Combo.Input(
                    "metrics",
                    options=list(METRIC_SETS),
                    default=next(iter(METRIC_SETS)),
                    tooltip="Which metrics to compute; dynamic degree needs RAFT weights or uses its proxy.",
                ),
                io.Int.Input(
                    "chunks",
                    default=10,
                    min=2,
                    max=100,
                    step=1,
                    tooltip="Equal chunks the video is split into for drift (LV-Bench uses 10); "
                    "needs at least this many frames.",
                ),
            ],
            outputs=[
                io.String.Output("scores_json", tooltip="All scores as JSON (per chunk, whole video, VDE)."),
                io.String.Output("table", tooltip="The headline scores as a plain-text table."),
            ],
        )

    @classmethod
    def validate_inputs(cls, chunks: int | None = None) -> bool | str:
        if chunks is not None and not 2 <= chunks <= 100:
            return f"chunks must be between 2 and 100, got {chunks}"
        return True

    @classmethod
    def execute(cls, metrics: str, chunks: int, video: Any = None, images: Any = None) -> io.NodeOutput:
        from inferix_core.errors import ConfigError
        from inferix_core.metrics.lvbench import format_table, score_video

        if video is None and images is None:
            raise ConfigError("Inferix LV-Bench Score has nothing to score: connect 'video' or 'images'")
        video = as_inferix_video(video)
        frames = video.frames if video is not None else images
        fps = float(video.fps) if video is not None else None
        # where the metric networks belong even before the folder exists: the proxies' notes then name
        # models/inferix_metrics/ (not the CLI's --weights-dir)
        weights = rt.model_folder("inferix_metrics", existing=False)
        result = score_video(frames, metrics=METRIC_SETS[metrics], chunks=chunks, weights_dir=weights, fps=fps)
        table = format_table([result])
        return io.NodeOutput(result.to_json(), table, ui={"text": [table]})
