"""InferixLVBenchPrompts: an LV-Bench caption JSON → the prompt schedule Block Denoise takes.

Reading the file (every accepted shape, times, video ids) is `inferix_core.metrics.lvbench.prompts`'s,
the same loader `load_prompt_schedule` exposes to scripts; this node only finds the file, picks the
video and keeps the captions that start inside the clip. Its output is the socket InferixPromptSchedule
produces, so an LV-Bench prompt set drives generation and LV-Bench scoring in one workflow.
"""

from __future__ import annotations

from pathlib import Path

from inferix_core.errors import ConfigError, InferixError

from . import input_files as files
from . import types
from .compat import io

EXAMPLE = "workflows/captions/lvbench_example.json"
INPUT = "captions_path"
SUFFIXES = (".json",)


def bundled_captions() -> list[str]:
    """The caption files the pack ships (the example first), named relative to the pack."""
    return sorted(files.bundled_files("workflows/captions", SUFFIXES), key=lambda n: n != EXAMPLE)


def caption_choices() -> list[str]:
    """The combo's list: the bundled caption files, then the input folder's JSON files."""
    return bundled_captions() + files.input_choices(SUFFIXES)


def find_captions(path: str) -> Path:
    """The caption file `path` names: a bundled one, or a file inside the input folder (nothing else)."""
    return files.resolve_input_file(path, INPUT, bundled_captions())


def load_schedule(
    captions_path: str, video_id: str, segment_seconds: float, until_seconds: float
) -> list[tuple[float, str]]:
    """The chosen video's [(start seconds, caption)], cut to captions starting before `until_seconds` (> 0)."""
    from inferix_core.metrics.lvbench.prompts import load_prompt_schedule

    path = find_captions(captions_path)
    name = captions_path.strip()  # messages name the file as given, not where it is on the server
    schedule = load_prompt_schedule(path, video_id.strip() or None, segment_seconds)
    if until_seconds > 0:
        schedule = [(t, p) for t, p in schedule if t < until_seconds]
    if not schedule:
        raise ConfigError(f"'{name}' has no captions before {until_seconds:g} s")
    if schedule[0][0] != 0:
        raise ConfigError(
            f"the first caption in '{name}' starts at {schedule[0][0]:g} s; a prompt schedule must start at 0"
        )
    times = [t for t, _ in schedule]
    if len(set(times)) != len(times):
        raise ConfigError(f"'{name}' has two captions starting at the same time; start times must differ")
    return schedule


class InferixLVBenchPrompts(io.ComfyNode):
    """An LV-Bench prompt set (timed captions of one video) as a prompt schedule."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixLVBenchPrompts",
            display_name="Inferix LV-Bench Prompts",
            category=f"{types.CATEGORY}/conditioning",
            description="Loads an LV-Bench caption file (a caption every few seconds of a source video) and "
            "turns one video's captions into a prompt schedule for Inferix Block Denoise, so the "
            "long video can be generated from the benchmark's prompts and scored in one graph.",
            inputs=[
                io.Combo.Input(
                    INPUT,
                    options=caption_choices(),
                    default=EXAMPLE,
                    tooltip="The caption JSON: the bundled example, or a file in ComfyUI's input folder "
                    "(put it there, then refresh the list). Nothing outside the input folder is read. "
                    "Accepted shapes are listed in inferix_core/metrics/lvbench/prompts.py.",
                ),
                io.String.Input(
                    "video_id",
                    default="",
                    tooltip="Which video of the file to use; leave empty when it holds one video.",
                ),
                io.Float.Input(
                    "segment_seconds",
                    default=2.5,
                    min=0.5,
                    max=60.0,
                    step=0.5,
                    tooltip="Seconds per caption for files whose captions carry no times "
                    "(LV-Bench captions every 2-3 s).",
                ),
                io.Float.Input(
                    "until_seconds",
                    default=0.0,
                    min=0.0,
                    max=3600.0,
                    step=0.5,
                    tooltip="Keep only captions that start before this second, to match the length "
                    "set in Block Denoise; 0 keeps them all.",
                ),
            ],
            outputs=[
                types.PromptSchedule.Output(
                    "prompt_schedule", tooltip="For the prompt_schedule input of Inferix Block Denoise."
                )
            ],
        )

    @classmethod
    def validate_inputs(cls, captions_path: str | None = None) -> bool | str:
        # One input only: ComfyUI pins a validator's message on every input it names. The file is checked
        # here (where it is, that it reads); video_id and until_seconds when the node runs.
        if captions_path is None:  # linked, checked when it runs
            return True
        from inferix_core.metrics.lvbench.prompts import load_prompt_schedules

        try:
            load_prompt_schedules(find_captions(captions_path))
        except InferixError as exc:
            return str(exc)
        return True

    @classmethod
    def execute(cls, captions_path: str, video_id: str, segment_seconds: float, until_seconds: float) -> io.NodeOutput:
        from inferix_core.api import PromptSchedule

        schedule = load_schedule(captions_path, video_id, segment_seconds, until_seconds)
        return io.NodeOutput(PromptSchedule(tuple(schedule)))
