"""Inferix LV-Bench Prompts: a caption JSON becomes the same prompt schedule Inferix Prompt Schedule makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferix_core.api import PromptSchedule
from inferix_core.errors import ConfigError


def _execute(cls, **kwargs):
    args = {"captions_path": "", "video_id": "", "segment_seconds": 2.5, "until_seconds": 0.0, **kwargs}
    return cls.execute(**args)[0]


def test_bundled_example_gives_a_prompt_schedule(node_classes):
    cls = node_classes["InferixLVBenchPrompts"]
    assert cls.RETURN_TYPES == node_classes["InferixPromptSchedule"].RETURN_TYPES == ("INFERIX_PROMPT_SCHEDULE",)
    schedule = _execute(cls, captions_path="workflows/captions/lvbench_example.json")
    assert isinstance(schedule, PromptSchedule)
    assert [t for t, _ in schedule.entries] == [0.0, 7.5, 15.0, 22.5]
    cut = _execute(cls, captions_path="workflows/captions/lvbench_example.json", until_seconds=10.0)
    assert [t for t, _ in cut.entries] == [0.0, 7.5]


@pytest.fixture
def input_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "input"
    folder.mkdir()
    monkeypatch.setenv("INFERIX_INPUT_DIR", str(folder))
    return folder


def test_picks_a_video_from_a_file_in_the_input_folder(node_classes, input_dir: Path):
    path = input_dir / "caps.json"
    path.write_text(
        json.dumps({"a": ["one", "two"], "b": [{"start": 0, "caption": "x"}, {"start": 3, "caption": "y"}]})
    )
    cls = node_classes["InferixLVBenchPrompts"]
    assert _execute(cls, captions_path="caps.json", video_id="b").entries == ((0.0, "x"), (3.0, "y"))
    assert _execute(cls, captions_path="caps.json", video_id="a", segment_seconds=4.0).entries == (
        (0.0, "one"),
        (4.0, "two"),
    )
    assert cls.VALIDATE_INPUTS(captions_path="caps.json") is True  # video_id is checked when it runs
    with pytest.raises(ConfigError, match="video_id"):
        _execute(cls, captions_path="caps.json")
    with pytest.raises(ConfigError, match=r"captions_path .* outside the input folder"):
        _execute(cls, captions_path=str(path))  # the same file by its absolute path: refused
    assert "caps.json" in cls.INPUT_TYPES()["required"]["captions_path"][0]  # listed in the combo


def test_validation_names_the_missing_or_bad_file(node_classes, input_dir: Path):
    cls = node_classes["InferixLVBenchPrompts"]
    assert cls.VALIDATE_INPUTS(captions_path="workflows/captions/lvbench_example.json") is True
    assert "not a file" in cls.VALIDATE_INPUTS(captions_path="nope.json")
    assert "empty" in cls.VALIDATE_INPUTS(captions_path="  ")
    bad = input_dir / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in cls.VALIDATE_INPUTS(captions_path="bad.json")
    late = input_dir / "late.json"
    late.write_text(json.dumps([{"start": 2, "caption": "x"}]))
    with pytest.raises(ConfigError, match="start at 0"):  # a rule of the schedule: checked when it runs
        _execute(cls, captions_path="late.json")
    assert cls.VALIDATE_INPUTS(captions_path=None) is True  # a linked input is checked when it runs
