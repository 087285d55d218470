"""A queued workflow reads files only from the input folder or the pack (issue #52).

Through `inferix run` on the quickstart workflow with an LV-Bench Prompts node: a caption path that is
absolute, climbs out with `..`, or leads out through a link is refused before anything runs, in one line
naming `captions_path`, and nothing of the file is echoed. A caption file inside the input folder
(`--input-dir`) is read, and a caption the model cannot use is reported without quoting it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inferix_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET_CAPTION_7Q"


def caption_file(path: Path, caption: str = SECRET) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"video_id": "s", "fps": 16, "captions": [{"start": 0, "end": 9, "caption": caption}]}))
    return path


def workflow(tmp_path: Path, captions_path: str) -> Path:
    wf = json.loads((ROOT / "workflows" / "api" / "quickstart_api.json").read_text())
    den = next(k for k, v in wf.items() if v["class_type"] == "InferixBlockDenoise")
    wf[den]["inputs"]["num_blocks"] = 2
    wf["99"] = {
        "class_type": "InferixLVBenchPrompts",
        "inputs": {"captions_path": captions_path, "video_id": "", "segment_seconds": 2.5, "until_seconds": 0.0},
    }
    wf[den]["inputs"]["prompt_schedule"] = ["99", 0]
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(wf))
    return path


def run(tmp_path: Path, captions_path: str, capsys, *extra: str) -> tuple[int, str]:
    argv = ["run", str(workflow(tmp_path, captions_path)), "--output-dir", str(tmp_path / "out"), "--no-progress"]
    code = main([*argv, "--input-dir", str(tmp_path / "input"), *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def outside_paths(tmp_path: Path) -> dict[str, str]:
    secret = caption_file(tmp_path / "secret" / "caps.json")
    (tmp_path / "input").mkdir(exist_ok=True)
    os.symlink(secret.parent, tmp_path / "input" / "linked")
    return {
        "absolute": str(secret),
        "climbs out of the input folder": "../secret/caps.json",
        "climbs out of the working dir": os.path.relpath(secret, os.getcwd()),
        "annotated and climbing": "../secret/caps.json [input]",
        "a link out of the input folder": "linked/caps.json",
        "home": "~/caps.json",
    }


@pytest.mark.parametrize(
    "kind",
    [
        "absolute",
        "climbs out of the input folder",
        "climbs out of the working dir",
        "annotated and climbing",
        "a link out of the input folder",
        "home",
    ],
)
def test_caption_paths_outside_the_input_folder_are_refused_through_inferix_run(tmp_path, capsys, kind):
    given = outside_paths(tmp_path)[kind]
    code, text = run(tmp_path, given, capsys)
    assert code == 2, text
    assert SECRET not in text and '"s"' not in text
    error = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "captions_path" in error[0] and "input folder" in error[0], text
    assert "ran " not in text  # refused at validation: no node ran


def test_a_caption_file_in_the_input_folder_is_read_and_its_text_never_echoed(tmp_path, capsys):
    caption_file(tmp_path / "input" / "sub" / "caps.json")  # a caption naming no scene of the bundled model
    code, text = run(tmp_path, "sub/caps.json", capsys)
    assert code == 2 and "names no scene" in text, text  # the file was read and used ...
    assert SECRET not in text  # ... and its caption is not quoted
    caption_file(tmp_path / "input" / "ok.json", "a drive at sunset")
    code, text = run(tmp_path, "ok.json [input]", capsys)  # ComfyUI's annotated name works too
    assert code == 0, text


def test_the_bundled_example_needs_no_input_folder(tmp_path, capsys):
    _, text = run(tmp_path, "workflows/captions/lvbench_example.json", capsys, "--set", "99.until_seconds=1")
    assert "captions_path" not in text, text


@pytest.mark.parametrize("name", ["ABS", "../secret.png", "link/secret.png"])
def test_inferix_play_takes_a_workflows_start_image_from_the_input_folder_only(tmp_path, monkeypatch, name):
    from inferix_core import cli
    from inferix_core.commands import play as play_cmd
    from inferix_core.errors import ConfigError

    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not for the workflow")
    (tmp_path / "input").mkdir()
    os.symlink(tmp_path, tmp_path / "input" / "link")
    wf = json.loads((ROOT / "workflows" / "api" / "matrix_game2_universal_api.json").read_text())
    load = next(v for v in wf.values() if v["class_type"] == "LoadImage")
    load["inputs"]["image"] = str(secret) if name == "ABS" else name
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(wf))
    monkeypatch.setenv("INFERIX_INPUT_DIR", str(tmp_path / "input"))
    monkeypatch.setattr(play_cmd, "load_world_model", lambda *a, **kw: "wm")
    models = tmp_path / "models"
    for rel in ("diffusion_models/base_distilled_model/base_distill.safetensors", "vae/Wan2.1_VAE.pth",
                "clip_vision/clip_vision_h.safetensors"):  # fmt: skip
        (models / rel).parent.mkdir(parents=True, exist_ok=True)
        (models / rel).touch()
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(models))
    with pytest.raises(ConfigError, match=r"outside the input folder.*--image PATH"):
        play_cmd.load_setup(cli.build_parser().parse_args(["play", str(path)]))
