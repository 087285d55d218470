"""`inferix play --save FILE` / `--resume FILE` on the bundled model (CPU): a resumed session continues bitwise.

Two sessions of 2 blocks (the second resumed from the first's file) end in the same world, every tensor
equal, as one session of 4 blocks; a "save" input writes a numbered file at the next boundary; names
that exist are refused before the session starts; a state of another cache setting is refused.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core import cli
from inferix_core.commands.play import play
from inferix_core.engine.world_state import read_world_state
from inferix_core.models.registry import load_world_model


def _tensors(path):
    return read_world_state(path).tensors


def test_resumed_play_ends_in_the_world_of_one_longer_play(tmp_path, capsys):
    first, second, whole = tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"
    base = ["play", "bundled", "--port", "0", "--no-save", "--device", "cpu", "--seed", "3"]
    common = [*base, "--max-blocks", "2"]
    assert cli.main([*common, "--save", str(first)]) == 0
    assert f"world state: {first}" in capsys.readouterr().out
    assert read_world_state(first).next_block == 2
    assert cli.main([*common, "--resume", str(first), "--save", str(second)]) == 0
    assert cli.main([*base, "--max-blocks", "4", "--save", str(whole)]) == 0
    resumed, straight = _tensors(second), _tensors(whole)
    assert read_world_state(second).header["position"] == read_world_state(whole).header["position"]
    assert resumed.keys() == straight.keys() and any(k.startswith("cache.") for k in resumed)
    for key, value in resumed.items():
        assert torch.equal(value, straight[key]), key  # KV cache, noise, prompt, decoder cache, history

    assert cli.main([*common, "--save", str(first)]) == 2  # exists: refused before the session starts
    assert "never overwritten" in capsys.readouterr().err


def test_a_save_input_writes_a_numbered_file_at_the_next_boundary(tmp_path):
    world = load_world_model("bundled", device="cpu")
    target = tmp_path / "w.safetensors"
    result = play(world, width=64, height=64, port=0, output=None, max_blocks=2, save=target,
                  on_ready=lambda view: view.inputs.put({"type": "save"}))  # fmt: skip
    assert result.world_files == [tmp_path / "w_00001.safetensors", target]
    assert read_world_state(result.world_files[0]).next_block == 1
    assert read_world_state(target).next_block == 2


def test_resume_with_other_cache_settings_is_refused(tmp_path, capsys):
    from inferix_core.cache import KVCacheConfig

    world = load_world_model("bundled", device="cpu")
    path = tmp_path / "w.safetensors"
    play(world, width=64, height=64, port=0, output=None, max_blocks=1, save=path)
    with pytest.raises(Exception, match="another KV cache settings"):
        play(world, width=64, height=64, port=0, output=None, max_blocks=1, cache=KVCacheConfig(window_frames=9),
             world_state=read_world_state(path))  # fmt: skip
