"""Model names from a workflow resolve only inside ComfyUI's model folders (issue #20, item 2).

A `/prompt` client can put any string in `model`, `vae`, `preview_decoder` or `text_encoder`, and the
loader's validate_inputs takes over ComfyUI's own check of the combo choices. A stand-in `folder_paths`
(a naive `get_full_path` that joins, like older ComfyUI) shows that only files under the folder pass,
and that a refusal never quotes the file it was pointed at.
"""

from __future__ import annotations

import os
import types

import pytest
from inferix_nodes import comfy_runtime as rt
from inferix_nodes.load_world_model import InferixLoadWorldModel

from inferix_core.errors import MissingFileError


@pytest.fixture
def comfy_folders(tmp_path, monkeypatch):
    models = tmp_path / "models"
    for sub in ("diffusion_models", "vae", "vae_approx", "text_encoders"):
        (models / sub / "nested").mkdir(parents=True)
        (models / sub / "ok.safetensors").write_bytes(b"x" * 16)
        (models / sub / "nested" / "deep.safetensors").write_bytes(b"x" * 16)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:secret\n")

    fake = types.SimpleNamespace(
        get_folder_paths=lambda folder: [str(models / folder)],
        get_full_path=lambda folder, name: os.path.join(str(models / folder), name),  # naive: no confinement
        get_filename_list=lambda folder: ["ok.safetensors"],
    )
    monkeypatch.setattr(rt, "folder_paths", fake)
    return models, secret


HOSTILE = ["{secret}", "../../secret.txt", "../../../../../../etc/passwd", "/etc/passwd", "nested/../../../secret.txt"]


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("folder", ["diffusion_models", "vae", "vae_approx", "text_encoders"])
def test_inside_comfyui_only_model_folder_files_resolve(comfy_folders, folder, name):
    _, secret = comfy_folders
    with pytest.raises(MissingFileError, match="only files under"):
        rt.resolve_model_file(folder, name.format(secret=secret))


@pytest.mark.parametrize("name", ["ok.safetensors", "nested/deep.safetensors"])
def test_files_in_the_model_folder_resolve(comfy_folders, name):
    models, _ = comfy_folders
    assert rt.resolve_model_file("vae", name) == str(models / "vae" / name)


@pytest.mark.parametrize("input_name", ["model", "vae", "preview_decoder", "text_encoder"])
def test_the_loader_refuses_paths_outside_and_never_echoes_them(comfy_folders, input_name):
    """Refused when the node runs, before any file is opened, all names in one message (issue #52)."""
    from inferix_nodes.load_world_model import missing_files

    _, secret = comfy_folders
    for name in (str(secret), "/etc/passwd", "../../secret.txt"):
        assert InferixLoadWorldModel.validate_inputs(**{input_name: name}) is True  # one message, at run time
        answer = missing_files(**{input_name: name})
        assert isinstance(answer, str) and "Only files inside those folders" in answer, answer
        assert "root:x" not in answer and "secret\n" not in answer
        args = {"model": "bundled", "vae": "bundled", "preview_decoder": "none", "text_encoder": "bundled"}
        with pytest.raises(MissingFileError, match="Only files inside"):
            InferixLoadWorldModel.execute(**{**args, input_name: name}, dtype="auto", attention="sdpa", device="cpu")


def test_headless_models_dir_is_confined_too(tmp_path, monkeypatch):
    monkeypatch.setattr(rt, "folder_paths", None)
    models = tmp_path / "models"
    (models / "vae").mkdir(parents=True)
    (models / "vae" / "v.safetensors").write_bytes(b"x")
    (tmp_path / "elsewhere.safetensors").write_bytes(b"x")
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(models))
    monkeypatch.chdir(tmp_path / "models")  # "../elsewhere" as a CLI path would be relative to here
    assert rt.resolve_model_file("vae", "v.safetensors") == str(models / "vae" / "v.safetensors")
    # a name that climbs out of $INFERIX_MODELS_DIR/vae is not looked up there (only as the CLI path it is)
    assert rt.resolve_model_file("vae", "../elsewhere.safetensors") == "../elsewhere.safetensors"
    with pytest.raises(MissingFileError):
        rt.resolve_model_file("vae", "../../elsewhere.safetensors")
