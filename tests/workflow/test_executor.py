"""Headless execution: order, only what outputs need, ui files, failures and interrupts."""

from __future__ import annotations

import dummy_nodes
import pytest

from inferix_core.errors import GenerationInterruptedError, WorkflowError
from inferix_core.workflow import execute, execution_order, validate


def test_runs_in_dependency_order_and_reports_files(workflow, nodes, tmp_path):
    result = execute(workflow, nodes, output_dir=tmp_path, progress=False)
    assert result.order == ["1", "2", "3"]
    assert dummy_nodes.CALLS == ["Number(3)", "Seeded(3,4,add,2.0,0)", "SaveText(14)"]
    assert result.outputs["2"] == (14,)
    assert result.files == [tmp_path / "result_3.txt"]
    assert (tmp_path / "result_3.txt").read_text() == "14"
    assert result.ui["3"]["files"][0]["filename"] == "result_3.txt"


def test_order_is_topological_with_id_ties(nodes):
    wf = {
        "10": {"class_type": "Test_Number", "inputs": {"value": 1}},
        "2": {"class_type": "Test_Number", "inputs": {"value": 2}},
        "5": {"class_type": "Test_Add", "inputs": {"a": ["10", 0], "b": ["2", 0]}},
        "1": {"class_type": "Test_SaveText", "inputs": {"value": ["5", 0], "prefix": "s"}},
        "99": {"class_type": "Test_Number", "inputs": {"value": 9}},  # not needed by any output
    }
    assert execution_order(validate(wf, nodes), ["1"]) == ["2", "10", "5", "1"]


def test_unneeded_nodes_do_not_run(workflow, nodes, tmp_path):
    workflow["8"] = {"class_type": "Test_Number", "inputs": {"value": 50}}
    execute(workflow, nodes, output_dir=tmp_path, progress=False)
    assert "Number(50)" not in dummy_nodes.CALLS


def test_overrides_and_progress_bars(workflow, nodes, tmp_path):
    result = execute(workflow, nodes, output_dir=tmp_path, overrides=["1.value=10", "2.mode=mul"], progress=True)
    assert result.outputs["2"] == (80,)  # 10 * 4 * 2.0


def test_validation_happens_before_anything_runs(workflow, nodes, tmp_path):
    workflow["2"]["inputs"]["mode"] = "nope"
    with pytest.raises(WorkflowError):
        execute(workflow, nodes, output_dir=tmp_path, progress=False)
    assert dummy_nodes.CALLS == []


def test_node_failure_names_the_node(workflow, nodes, tmp_path):
    workflow["2"] = {"class_type": "Test_Boom", "inputs": {"x": ["1", 0]}}
    with pytest.raises(WorkflowError, match=r"node 2: Test_Boom failed: RuntimeError: kaboom") as info:
        execute(workflow, nodes, output_dir=tmp_path, progress=False)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_interrupt_stops_the_run(workflow, nodes, tmp_path):
    workflow["2"] = {"class_type": "Test_Interrupter", "inputs": {"x": ["1", 0]}}
    with pytest.raises(GenerationInterruptedError):
        execute(workflow, nodes, output_dir=tmp_path, progress=False)
    assert not any(c.startswith("SaveText") for c in dummy_nodes.CALLS)
    execute(
        {**workflow, "2": {"class_type": "Test_Add", "inputs": {"a": ["1", 0], "b": ["1", 0]}}},
        nodes,
        output_dir=tmp_path,
        progress=False,
    )  # the flag is cleared for the next run


def test_runs_inside_inference_mode(nodes, tmp_path):
    import torch

    seen = []

    class Probe:
        @classmethod
        def INPUT_TYPES(cls):  # noqa: N802 - ComfyUI V1 interface
            return {"required": {}}

        RETURN_TYPES = ()
        FUNCTION = "probe"
        OUTPUT_NODE = True

        def probe(self):
            seen.append(torch.is_inference_mode_enabled())
            return ()

    execute({"1": {"class_type": "Probe", "inputs": {}}}, {"Probe": Probe}, output_dir=tmp_path, progress=False)
    assert seen == [True]
