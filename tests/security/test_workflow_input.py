"""Hand-made and hostile workflow files get one-line errors, not tracebacks (issue #20, item 7).

A 5,000-node chain is a valid graph (its cycle check must not recurse), and UI-format files whose slots
are ints or whose types are lists are malformed, said in one line.
"""

from __future__ import annotations

import json
import sys

import pytest

from inferix_core.errors import WorkflowError
from inferix_core.workflow import load_workflow, validate
from inferix_core.workflow.validation import find_cycle

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "workflow"))
import dummy_nodes

NODES = dummy_nodes.NODE_CLASS_MAPPINGS
CHAIN = 5000


def chain(n: int, cycle: bool = False) -> dict:
    """Save ← n ← n-1 … ← 1: node i reads node i+1, so a search from node 1 goes n deep."""
    wf = {str(n): {"class_type": "Test_Number", "inputs": {"value": 1}}}
    for i in range(n - 1, 0, -1):
        wf[str(i)] = {"class_type": "Test_Add", "inputs": {"a": [str(i + 1), 0], "b": [str(i + 1), 0]}}
    if cycle:
        wf[str(n)] = {"class_type": "Test_Add", "inputs": {"a": ["1", 0], "b": ["1", 0]}}
    wf[str(n + 1)] = {"class_type": "Test_SaveText", "inputs": {"value": ["1", 0], "prefix": "r"}}
    return wf


def test_long_chain_validates_without_recursion_error():
    assert "Test_Add" in NODES
    wf = validate(load_workflow(chain(CHAIN)), NODES)
    assert len(wf) == CHAIN + 1


def test_long_cycle_is_found_iteratively():
    wf = load_workflow(chain(CHAIN, cycle=True))
    cycle = find_cycle(wf, set(wf))
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == CHAIN + 1


def test_long_chain_cycle_reported_by_validate():
    with pytest.raises(WorkflowError, match="cycle"):
        validate(load_workflow(chain(CHAIN, cycle=True)), NODES)


def ui(nodes, links=()):
    return {"nodes": nodes, "links": list(links)}


MALFORMED_UI = {
    "slot-int": ui([{"id": 1, "type": "Test_Number", "inputs": [3], "widgets_values": [1]}]),
    "outputs-int": ui([{"id": 1, "type": "Test_Number", "outputs": [0, 1], "widgets_values": [1]}]),
    "type-list": ui([{"id": 1, "type": ["Test_Number"], "widgets_values": [1]}]),
    "type-dict": ui([{"id": 1, "type": {"a": 1}}]),
    "node-int": ui([7]),
    "id-list": ui([{"id": [1], "type": "Test_Number"}]),
    "inputs-dict": ui([{"id": 1, "type": "Test_SaveText", "inputs": {"value": 1}}]),
    "link-list": ui([{"id": 1, "type": "Test_SaveText", "inputs": [{"name": "value", "link": [1]}]}]),
    "widgets-int": ui([{"id": 1, "type": "Test_Number", "widgets_values": 5}]),
    "bad-link-row": ui(
        [{"id": 1, "type": "Test_SaveText", "inputs": [{"name": "value", "type": "INT", "link": 1}]}],
        links=[["x", "y", "z", "w", "v"]],
    ),
    "link-dict-missing": ui(
        [{"id": 1, "type": "Test_SaveText", "inputs": [{"name": "value", "type": "INT", "link": 1}]}],
        links=[{"id": 1}],
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_UI))
def test_malformed_ui_format_is_one_workflow_error(name):
    with pytest.raises(WorkflowError) as info:
        load_workflow(MALFORMED_UI[name], NODES)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["slot-int", "type-list", "bad-link-row"])
def test_cli_prints_one_line_for_malformed_ui(tmp_path, capsys, name):
    from inferix_core.cli import main

    path = tmp_path / "wf.json"
    path.write_text(json.dumps(MALFORMED_UI[name]))
    assert main(["run", str(path), "--nodes-module", "dummy_nodes", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
