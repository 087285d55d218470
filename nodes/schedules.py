"""InferixPromptSchedule and InferixActionSchedule: timed text lines → the core's schedules.

Each line is `<time> | <value>` or `<time>: <value>`, time in seconds (12.5) or MM:SS(.s). The nodes
only split lines; reading times is `inferix_core.metrics.lvbench.prompts`'s (the same parser the CLI
uses for LV-Bench caption files), and mapping times to blocks is `inferix_core.api`'s.
"""

from __future__ import annotations

import re

from inferix_core.errors import ConfigError
from inferix_core.metrics.lvbench.prompts import parse_timestamp

from . import types
from .compat import io

LINE = re.compile(r"^\s*([\d:.]+)\s*s?\s*[|:]\s*(.+?)\s*$")


def parse_schedule(text: str, what: str) -> list[tuple[float, str]]:
    """[(start_seconds, value)] from timed lines; raises ConfigError naming the bad line."""
    schedule: list[tuple[float, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = LINE.match(line)
        if match is None:
            raise ConfigError(
                f"{what} line {number} '{line.strip()}' is not '<seconds> | <{what}>' "
                f"(e.g. '0 | a red car' or '00:05 | a blue car')"
            )
        start = parse_timestamp(match.group(1))
        if schedule and start <= schedule[-1][0]:
            raise ConfigError(
                f"{what} line {number} starts at {start:g} s, not after the previous line "
                f"({schedule[-1][0]:g} s); list lines in time order"
            )
        schedule.append((start, match.group(2)))
    if not schedule:
        raise ConfigError(f"the {what} schedule is empty; write one '<seconds> | <{what}>' line at least")
    if schedule[0][0] != 0:
        raise ConfigError(f"the first {what} starts at {schedule[0][0]:g} s; the schedule must start at 0")
    return schedule


def _check(text: str | None, what: str) -> bool | str:
    if text is None:
        return True
    try:
        parse_schedule(text, what)
    except ConfigError as exc:
        return str(exc)
    return True


class InferixPromptSchedule(io.ComfyNode):
    """Prompts that change over time, for long videos (LongLive-style prompt switching)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixPromptSchedule",
            display_name="Inferix Prompt Schedule",
            category=f"{types.CATEGORY}/conditioning",
            description="One prompt per line, each with the second it starts at. The prompt switches at the "
            "nearest block boundary; the KV cache keeps the scene continuous.",
            inputs=[
                io.String.Input(
                    "schedule",
                    multiline=True,
                    default="0 | a car drives along a coastal road at sunset\n5 | the road climbs into snowy mountains",
                    tooltip="Lines '<start seconds> | <prompt>' (or MM:SS), in time order, the first "
                    "at 0. Lines starting with # are ignored.",
                ),
            ],
            outputs=[
                types.PromptSchedule.Output(
                    "prompt_schedule", tooltip="For the prompt_schedule input of Inferix Block Denoise."
                )
            ],
        )

    @classmethod
    def validate_inputs(cls, schedule: str | None = None) -> bool | str:
        return _check(schedule, "prompt")

    @classmethod
    def execute(cls, schedule: str) -> io.NodeOutput:
        from inferix_core.api import PromptSchedule

        return io.NodeOutput(PromptSchedule(tuple(parse_schedule(schedule, "prompt"))))


class InferixActionSchedule(io.ComfyNode):
    """Control inputs over time for interactive (action-conditioned) world models."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixActionSchedule",
            display_name="Inferix Action Schedule",
            category=f"{types.CATEGORY}/conditioning",
            description="One action per line, each with the second it starts at; it holds until the next line "
            "and switches at the nearest block boundary. "
            "Action names come from the model family (the bundled driving model: none, "
            "steer_left, steer_right, accelerate, brake). Keyboard/mouse models (Matrix-Game 2.0) take "
            "keys and an optional camera turn per frame instead: '0 | W', '2 | W+A yaw=0.1', "
            "'4 | S pitch=-0.05', '6 | none' (universal: W S A D move, I K J L turn; GTA drive: W S, "
            "A D steer; TempleRun: W jump, S slide, A D side, Z C turn, Q no move).",
            inputs=[
                io.String.Input(
                    "schedule",
                    multiline=True,
                    default="0 | accelerate\n2 | steer_left\n3.5 | accelerate\n5 | brake",
                    tooltip="Lines '<start seconds> | <action>' in time order, the first at 0. "
                    "For keyboard/mouse models an action is keys plus optional pitch=/yaw= "
                    "(per-frame camera deltas; the authors' demos use ±0.1). "
                    "Unknown action names or keys fail when the model reads them.",
                ),
            ],
            outputs=[
                types.ActionSchedule.Output(
                    "action_schedule",
                    tooltip="Actions over time for the action_schedule input of "
                    "Inferix Block Denoise; they switch at block boundaries.",
                )
            ],
        )

    @classmethod
    def validate_inputs(cls, schedule: str | None = None) -> bool | str:
        return _check(schedule, "action")

    @classmethod
    def execute(cls, schedule: str) -> io.NodeOutput:
        from inferix_core.api import ActionSchedule

        return io.NodeOutput(ActionSchedule(tuple(parse_schedule(schedule, "action"))))
