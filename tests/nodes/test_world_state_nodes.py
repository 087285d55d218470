"""Save World State / Load World State and Block Denoise's world_state input and output, headless.

A world continued through a file (Save → Load → Block Denoise) equals the same world continued by a
linked Block Denoise in one workflow, bitwise; the state is captured only when the output is linked;
files are numbered and never overwritten, and load only from inside the output or input folder.
"""

from __future__ import annotations

import os

import pytest
import torch

from inferix_core.errors import ConfigError, MissingFileError
from tests.nodes.test_node_execution import FixtureConditioning, tiny_workflow


def _denoise(node_id: str, blocks: int, world: list | None = None, seed: int = 7) -> dict:
    node = tiny_workflow()["4"]
    inputs = {**node["inputs"], "num_blocks": blocks, "seed": seed, "width": 48, "height": 32}
    inputs.pop("stream")
    if world is not None:
        inputs["world_state"] = world
    return {"class_type": "InferixBlockDenoise", "inputs": inputs}


def _base() -> dict:
    wf = tiny_workflow()
    return {k: wf[k] for k in ("1", "2", "3")}


def _run(node_classes, wf, output_dir):
    from inferix_core.workflow import execute

    return execute(wf, {**node_classes, "FixtureConditioning": FixtureConditioning}, output_dir=output_dir,
                   progress=False)  # fmt: skip


def test_continuing_through_a_file_equals_a_linked_continuation(node_classes, models_dir, output_dir):
    from inferix_nodes import world_state as ws_nodes

    linked = {**_base(), "4": _denoise("4", 2), "5": _denoise("5", 2, ["4", 4])}
    wf = {**linked, "6": {"class_type": "InferixSaveWorldState",
                          "inputs": {"world_state": ["4", 4], "filename_prefix": "inferix/world"}},
          "8": {"class_type": "InferixProfileReport", "inputs": {"video": ["5", 2]}}}  # fmt: skip
    res = _run(node_classes, wf, output_dir)
    saved = output_dir / "inferix" / "world_00001.safetensors"
    assert saved.is_file() and res.outputs["6"][0] == "inferix/world_00001.safetensors [output]"
    assert "after 2 blocks" in res.ui["6"]["text"][0]
    assert res.outputs["5"][4] is None  # nothing reads node 5's world: not captured

    assert "inferix/world_00001.safetensors [output]" in ws_nodes.world_files()
    resumed = {**_base(), "7": {"class_type": "InferixLoadWorldState",
                                "inputs": {"world_file": "inferix/world_00001.safetensors [output]"}},
               "5": _denoise("5", 2, ["7", 0], seed=99),  # the seed is unused when resuming
               "8": {"class_type": "InferixProfileReport", "inputs": {"video": ["5", 2]}}}  # fmt: skip
    again = _run(node_classes, resumed, output_dir)
    a, b = res.outputs["5"][0]["samples"], again.outputs["5"][0]["samples"]
    assert torch.isfinite(a).all() and torch.equal(a, b)
    assert torch.equal(res.outputs["5"][1], again.outputs["5"][1])  # decoded frames continue too
    assert "continued the" in again.ui["5"]["text"][0]
    fresh = _run(node_classes, {**_base(), "5": _denoise("5", 2), "8": wf["8"]}, output_dir)
    assert not torch.equal(fresh.outputs["5"][0]["samples"], a)  # continuing is not starting over

    _run(node_classes, wf, output_dir)  # a second save never overwrites the first
    assert (output_dir / "inferix" / "world_00002.safetensors").is_file()


def test_a_world_of_other_settings_is_refused_by_block_denoise(node_classes, models_dir, output_dir):
    wf = {**_base(), "4": _denoise("4", 1), "5": _denoise("5", 1, ["4", 4]),
          "8": {"class_type": "InferixProfileReport", "inputs": {"video": ["5", 2]}}}  # fmt: skip
    wf["5"]["inputs"]["width"] = 64
    with pytest.raises(Exception, match="set width and height"):
        _run(node_classes, wf, output_dir)


def test_world_files_load_only_from_the_output_and_input_folders(tmp_path, output_dir, monkeypatch):
    from inferix_nodes import world_state as ws_nodes

    inp = tmp_path / "input"
    monkeypatch.setenv("INFERIX_INPUT_DIR", str(inp))
    (output_dir / "a").mkdir(parents=True)
    inp.mkdir()
    (output_dir / "a" / "w.safetensors").write_bytes(b"x")
    (inp / "v.safetensors").write_bytes(b"x")
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(b"x")
    os.symlink(outside, output_dir / "link.safetensors")
    assert ws_nodes.resolve_world_file("a/w.safetensors [output]") == (output_dir / "a" / "w.safetensors").resolve()
    assert ws_nodes.resolve_world_file("v.safetensors [input]") == (inp / "v.safetensors").resolve()
    for bad in ("../secret.safetensors [output]", f"{outside} [output]", "link.safetensors [output]",
                "a/../../secret.safetensors", "C:/x.safetensors [input]"):  # fmt: skip
        with pytest.raises(ConfigError):
            ws_nodes.resolve_world_file(bad)
    with pytest.raises(MissingFileError):
        ws_nodes.resolve_world_file("none")
    load = ws_nodes.InferixLoadWorldState
    assert "outside" in load.validate_inputs(world_file="link.safetensors [output]")
    with pytest.raises(ConfigError, match=r"not an Inferix world state|not a readable world state"):
        load.execute(world_file="a/w.safetensors [output]")
    assert ws_nodes.InferixSaveWorldState.validate_inputs(filename_prefix="../up") is not True


def test_output_linked_reads_the_prompt_graph():
    from inferix_nodes.block_denoise import output_linked

    prompt = {"4": {"inputs": {}}, "6": {"inputs": {"world_state": ["4", 4], "x": ["4", 2]}}}
    assert output_linked(prompt, "4", 4) and not output_linked(prompt, "6", 4) and not output_linked(prompt, "4", 3)
    assert output_linked(None, "4", 4)  # no graph given: captured to be safe


def test_the_shipped_continue_world_workflow_runs_headless(node_classes, output_dir):
    import json
    from pathlib import Path

    api = json.loads(
        (Path(__file__).resolve().parents[2] / "workflows" / "api" / "continue_world_api.json").read_text()
    )
    for node in api.values():  # keep it quick: fewer blocks, the same wiring
        if node["class_type"] == "InferixBlockDenoise":
            node["inputs"]["num_blocks"] = 2
    res = _run(node_classes, api, output_dir)
    saved = sorted(p.name for p in (output_dir / "inferix").glob("world_*.safetensors"))
    assert saved == ["world_00001.safetensors"]
    denoisers = [nid for nid, n in api.items() if n["class_type"] == "InferixBlockDenoise"]
    first, second = (res.outputs[nid] for nid in denoisers)
    assert first[4] is not None and first[4].next_block == 2  # linked: captured
    assert "continued the" in res.ui[denoisers[1]]["text"][0]
    assert second[2].files and Path(second[2].files[0]).is_file()
