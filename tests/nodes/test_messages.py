"""One cause, one message on the input that caused it; hints inside the limits; progress that adds up (issue #52).

ComfyUI turns a validator's error into one message per input the validator names (execution.py attaches it
to each), so a validator names one input at most; the headless executor pins that message on the input too.
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path

import pytest
from inferix_nodes import comfy_runtime as rt
from inferix_nodes.block_denoise import MAX_SIZE, size_problem

from inferix_core.cli import main
from inferix_core.errors import MissingFileError

ROOT = Path(__file__).resolve().parents[2]
ALWAYS_TRUE = {"InferixLoadWorldModel"}  # names its file inputs only to check them all at once when it runs


def widget_args(cls) -> list[str]:
    validator = getattr(cls, "VALIDATE_INPUTS", None)
    if validator is None:
        return []
    return [a for a in inspect.signature(validator).parameters if a not in ("cls", "self", "s")]


def test_every_validator_names_at_most_one_input(node_classes):
    for name, cls in node_classes.items():
        args = widget_args(cls)
        if name in ALWAYS_TRUE:
            hostile = {a: "../../../etc/passwd" for a in args}
            assert cls.VALIDATE_INPUTS(**hostile) is True, name  # so ComfyUI shows nothing per input
            continue
        assert len(args) <= 1, f"{name}.VALIDATE_INPUTS names {args}: ComfyUI would repeat its message on each"


def run(tmp_path: Path, capsys, mutate, name: str = "quickstart") -> tuple[int, str]:
    wf = json.loads((ROOT / "workflows" / "api" / f"{name}_api.json").read_text())
    mutate(wf)
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(wf))
    code = main(["run", str(path), "--output-dir", str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr()
    return code, out.out + out.err


def denoise(wf: dict) -> dict:
    return next(v for v in wf.values() if v["class_type"] == "InferixBlockDenoise")["inputs"]


@pytest.mark.parametrize(("width", "expected"), [(100000, "above the maximum 4096"), (100, "try 96")])
def test_a_bad_width_is_one_message_on_width_with_a_hint_inside_the_limits(tmp_path, capsys, width, expected):
    code, text = run(tmp_path, capsys, lambda wf: denoise(wf).update(width=width, num_blocks=1))
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and expected in errors[0], text
    assert "width" in errors[0] and "height" not in errors[0] and "num_blocks" not in errors[0]
    assert errors[0].count(expected) == 1


def test_size_hints_stay_inside_the_limits():
    assert size_problem(100000, 96).endswith(f"try {MAX_SIZE}")  # was "try 100000" with a maximum of 4096
    assert size_problem(4, 96).endswith("try 16") and size_problem(96, 96) is None


def test_a_refused_caption_path_is_pinned_on_captions_path_once(tmp_path, capsys):
    def add(wf):
        wf["99"] = {
            "class_type": "InferixLVBenchPrompts",
            "inputs": {"captions_path": "/etc/hostname", "video_id": "", "segment_seconds": 2.5, "until_seconds": 0},
        }
        denoise(wf)["prompt_schedule"] = ["99", 0]

    code, text = run(tmp_path, capsys, add)
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "input 'captions_path'" in errors[0], text


def test_all_missing_model_files_in_one_message(node_classes, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(tmp_path))
    cls = node_classes["InferixLoadWorldModel"]
    with pytest.raises(MissingFileError) as info:
        cls.execute(model="a.safetensors", vae="b.safetensors", preview_decoder="none",
                    text_encoder="c.safetensors", dtype="auto", attention="sdpa", device="cpu")  # fmt: skip
    message = str(info.value)
    assert "3 model file(s)" in message and "\n" not in message
    assert all(n in message for n in ("model 'a.safetensors'", "vae 'b.safetensors'", "text_encoder 'c.safetensors'"))


def test_the_lora_message_does_not_offer_bundled(node_classes):
    message = node_classes["InferixLoadWorldModelLoRA"].VALIDATE_INPUTS(lora_name="nope.safetensors")
    assert isinstance(message, str) and "bundled" not in message
    with pytest.raises(MissingFileError) as info:
        rt.resolve_model_file("loras", "bundled", bundled=False)  # not a LoRA: no bundled one exists
    assert "choose 'bundled'" not in str(info.value)


def test_lvbench_score_names_the_metrics_folder_not_a_cli_flag(node_classes, monkeypatch, caplog):
    import torch
    from inferix_nodes.core_video import core_video

    monkeypatch.delenv("INFERIX_MODELS_DIR", raising=False)
    cls = node_classes["InferixLVBenchScore"]
    caplog.set_level(logging.INFO)
    scores = cls.execute(metrics="published (5 VDE metrics)", chunks=2, video=core_video(torch.rand(8, 32, 32, 3), 8))
    text = caplog.text + scores[0] + scores[1]
    assert "--weights-dir" not in text and "inferix_metrics" in text


def test_the_memory_plan_of_a_cpu_run_does_not_say_gpu():
    from inferix_core.api import plan_run
    from inferix_core.models.registry import load_world_model

    world = load_world_model("bundled", device="cpu")
    text = plan_run(world, None, 96, 96, num_blocks=2).describe()
    assert "total on the GPU" not in text and "total in CPU memory" in text


def test_progress_of_a_continued_world_counts_this_runs_blocks(tmp_path, capsys):
    events = []
    remove = rt.add_event_listener(lambda name, data: events.append(data) if name == rt.BLOCK_EVENT else None)
    try:
        code, text = run(tmp_path, capsys, lambda wf: None, name="continue_world")
    finally:
        remove()
    assert code == 0, text
    for run_id in {e["run"] for e in events}:
        mine = [e for e in events if e["run"] == run_id]
        assert [e["block"] for e in mine] == list(range(len(mine))), mine  # never "block 14/7"
        assert all(e["block"] < e["num_blocks"] for e in mine)
    assert max(e["world_block"] for e in events) == 13  # the continued world's own count goes on
