"""LV-Bench caption JSON → prompt schedules, over every accepted shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferix_core.errors import ConfigError, MissingFileError
from inferix_core.metrics import load_prompt_schedule, load_prompt_schedules
from inferix_core.metrics.lvbench.prompts import parse_timestamp


def _write(tmp_path: Path, data: object, name: str = "caps.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_one_video_object(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "video_id": "v1",
            "fps": 24,
            "captions": [
                {"start": 2.5, "end": 5.0, "caption": " A dog runs. "},
                {"start": 0.0, "end": 2.5, "caption": "A dog sits."},
                {"start_frame": 120, "text": "The dog sleeps."},
            ],
        },
    )
    assert load_prompt_schedule(path) == [(0.0, "A dog sits."), (2.5, "A dog runs."), (5.0, "The dog sleeps.")]


def test_many_videos_as_list_and_as_mapping(tmp_path: Path) -> None:
    as_list = _write(
        tmp_path,
        [
            {"video_id": "a", "chunks": [{"timestamp": "00:00-00:02.5", "prompt": "x"}]},
            {"id": "b", "segments": [{"time": "0:01:02", "description": "y"}]},
        ],
    )
    assert load_prompt_schedules(as_list) == {"a": [(0.0, "x")], "b": [(62.0, "y")]}
    as_map = _write(tmp_path, {"a": [{"start_time": "3s", "caption": "p"}], "b": {"clips": ["q", "r"]}}, "m.json")
    assert load_prompt_schedules(as_map, segment_seconds=3.0) == {"a": [(3.0, "p")], "b": [(0.0, "q"), (3.0, "r")]}
    assert load_prompt_schedule(as_map, "b", segment_seconds=2.0) == [(0.0, "q"), (2.0, "r")]
    with pytest.raises(ConfigError, match="video_id"):
        load_prompt_schedule(as_map)


def test_bare_list_uses_the_file_stem(tmp_path: Path) -> None:
    path = _write(tmp_path, ["first", "second", "third"], "clip7.json")
    assert load_prompt_schedules(path) == {"clip7": [(0.0, "first"), (2.5, "second"), (5.0, "third")]}


def test_bad_inputs_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError):
        load_prompt_schedules(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="no caption"):
        load_prompt_schedule(_write(tmp_path, [{"start": 0, "label": "x"}]))
    with pytest.raises(ConfigError, match="fps"):
        load_prompt_schedule(_write(tmp_path, {"captions": [{"start_frame": 3, "caption": "x"}]}, "f.json"))
    with pytest.raises(ConfigError):
        parse_timestamp("soon")
    assert parse_timestamp("01:02.5") == 62.5 and parse_timestamp(4) == 4.0
