"""Weight files that are not what they claim (issue #20, items 2 and 7): one-line errors, no code run, no bytes echoed.

VAE, text encoder and transformer loaders each get a pickle that would run code, a pickle renamed
`.safetensors`, a truncated safetensors file, random bytes and a text file (standing in for /etc/passwd).
"""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, InferixError
from inferix_core.models.registry import load_text_encoder, load_vae, load_world_model

SECRET = b"root:x:0:0:secret-line-that-must-not-leak\n" * 50


class RunsCode:
    """Unpickling this creates a marker file: proof that code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def bad_files(folder):
    marker = folder / "CODE_RAN"
    files = {}
    with open(folder / "evil.pth", "wb") as f:
        pickle.dump({"decoder.conv1.weight": RunsCode(str(marker))}, f)
    files["pickle"] = folder / "evil.pth"
    (folder / "evil.safetensors").write_bytes((folder / "evil.pth").read_bytes())
    files["pickle-named-safetensors"] = folder / "evil.safetensors"
    torch.save({"decoder.conv1.weight": RunsCode(str(marker))}, folder / "evil_zip.pt")
    files["torch-zip-pickle"] = folder / "evil_zip.pt"
    save_file({"w": torch.randn(64, 64)}, str(folder / "good.safetensors"))
    data = (folder / "good.safetensors").read_bytes()
    (folder / "truncated.safetensors").write_bytes(data[: len(data) // 2])
    files["truncated"] = folder / "truncated.safetensors"
    torch.save({"w": torch.randn(64, 64)}, folder / "good.pt")
    data = (folder / "good.pt").read_bytes()
    (folder / "truncated.pt").write_bytes(data[: len(data) // 2])
    files["truncated-pt"] = folder / "truncated.pt"
    (folder / "random.safetensors").write_bytes(os.urandom(4096))
    files["random"] = folder / "random.safetensors"
    (folder / "passwd").write_bytes(SECRET)
    files["text"] = folder / "passwd"
    (folder / "empty.pth").write_bytes(b"")
    files["empty"] = folder / "empty.pth"
    return files, marker


LOADERS = {
    "vae": lambda p: load_vae(str(p), torch.device("cpu"), torch.float32),
    "text_encoder": lambda p: load_text_encoder(str(p), 16, torch.device("cpu"), torch.float32),
    "transformer": lambda p: load_world_model(str(p), device="cpu"),
}
KINDS = [
    "pickle",
    "pickle-named-safetensors",
    "torch-zip-pickle",
    "truncated",
    "truncated-pt",
    "random",
    "text",
    "empty",
]


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", KINDS)
def test_bad_weight_files_give_one_line_naming_the_file(tmp_path, loader, kind):
    files, marker = bad_files(tmp_path)
    path = files[kind]
    with pytest.raises(InferixError) as info:
        LOADERS[loader](path)
    message = str(info.value)
    assert isinstance(info.value, CheckpointLayoutError), f"{type(info.value).__name__}: {message}"
    assert path.name in message and "\n" not in message
    assert "root:x" not in message and "secret" not in message  # file contents are never echoed
    assert not marker.exists()  # no pickled code ran


def test_diffusers_index_cannot_point_outside_its_folder(tmp_path):
    folder = tmp_path / "transformer"
    folder.mkdir()
    save_file({"w": torch.randn(2)}, str(tmp_path / "outside.safetensors"))
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(
        '{"weight_map": {"w": "../outside.safetensors"}}'
    )
    with pytest.raises(CheckpointLayoutError, match="outside its folder"):
        load_world_model(str(folder), device="cpu")
