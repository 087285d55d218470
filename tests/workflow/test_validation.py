"""Each kind of workflow mistake is caught before anything runs, with a message naming node and input."""

from __future__ import annotations

import pytest

from inferix_core.errors import WorkflowError
from inferix_core.workflow import WorkflowValidationError, validate


def problems(workflow, nodes) -> list[str]:
    with pytest.raises(WorkflowValidationError) as info:
        validate(workflow, nodes)
    return [str(i) for i in info.value.issues]


def test_valid_workflow_passes_and_converts_values(workflow, nodes):
    workflow["2"]["inputs"]["scale"] = 2  # an int where a FLOAT is declared
    checked = validate(workflow, nodes)
    assert checked["2"]["inputs"]["scale"] == 2.0 and isinstance(checked["2"]["inputs"]["scale"], float)
    assert workflow["2"]["inputs"]["scale"] == 2  # the input is not modified


def test_unknown_class_type_suggests_close_names(workflow, nodes):
    workflow["2"]["class_type"] = "Test_Seded"
    [msg] = problems(workflow, nodes)
    assert msg.startswith("node 2: unknown node type 'Test_Seded'") and "'Test_Seeded'" in msg


def test_unknown_class_type_without_close_name_asks_about_the_pack(workflow, nodes):
    workflow["1"]["class_type"] = "SomethingElse"
    [msg] = problems(workflow, nodes)
    assert "node pack" in msg


def test_missing_required_input(workflow, nodes):
    del workflow["2"]["inputs"]["seed"]
    assert problems(workflow, nodes) == ["node 2 (Test_Seeded), input 'seed': required input is missing (expected INT)"]


def test_missing_optional_input_is_fine(workflow, nodes):
    validate(workflow, nodes)  # 'bias' is optional and absent


def test_link_to_missing_node(workflow, nodes):
    workflow["2"]["inputs"]["x"] = ["9", 0]
    [msg] = problems(workflow, nodes)
    assert msg == "node 2 (Test_Seeded), input 'x': links to node 9, which is not in the workflow"


def test_link_to_output_index_out_of_range(workflow, nodes):
    workflow["2"]["inputs"]["x"] = ["1", 2]
    [msg] = problems(workflow, nodes)
    assert "links to output 2 of node 1 (Test_Number), which has 1 output(s): INT" in msg


def test_wrong_type_on_link(workflow, nodes):
    workflow["4"] = {"class_type": "Test_Latent", "inputs": {}}
    workflow["2"]["inputs"]["x"] = ["4", 0]
    [msg] = problems(workflow, nodes)
    assert msg == (
        "node 2 (Test_Seeded), input 'x': expects INT but is linked to output 0 of node 4 "
        "(Test_Latent), which is LATENT"
    )


def test_star_input_accepts_any_type(workflow, nodes):
    workflow["4"] = {"class_type": "Test_Latent", "inputs": {}}
    workflow["3"]["inputs"]["value"] = ["4", 0]  # SaveText.value is '*'
    validate(workflow, nodes)


def test_cycle(nodes):
    wf = {
        "1": {"class_type": "Test_Add", "inputs": {"a": ["2", 0], "b": ["2", 0]}},
        "2": {"class_type": "Test_Add", "inputs": {"a": ["1", 0], "b": ["1", 0]}},
        "3": {"class_type": "Test_SaveText", "inputs": {"value": ["2", 0], "prefix": "x"}},
    }
    [msg] = problems(wf, nodes)
    assert "cycle" in msg and "1 → 2 → 1" in msg


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (101, "input 'value': value 101 is above the maximum 100 (allowed 0 to 100)"),
        (-1, "input 'value': value -1 is below the minimum 0 (allowed 0 to 100)"),
        ("many", "input 'value': expected INT, got str 'many'"),
        (True, "input 'value': expected INT, got bool True"),
        (2.5, "input 'value': expected INT, got float 2.5"),
    ],
)
def test_bad_constants(workflow, nodes, value, expected):
    workflow["1"]["inputs"]["value"] = value
    [msg] = problems(workflow, nodes)
    assert msg == f"node 1 (Test_Number), {expected}"


def test_value_not_in_choice_list_suggests(workflow, nodes):
    workflow["2"]["inputs"]["mode"] = "ad"
    [msg] = problems(workflow, nodes)
    assert msg == "node 2 (Test_Seeded), input 'mode': 'ad' is not one of ['add', 'mul']; did you mean 'add'?"


def test_validate_inputs_hook(nodes):
    wf = {
        "1": {"class_type": "Test_Picky", "inputs": {"n": 3}},
        "2": {"class_type": "Test_SaveText", "inputs": {"value": ["1", 0], "prefix": "p"}},
    }
    assert problems(wf, nodes) == ["node 1 (Test_Picky), input 'n': n must be even, got 3"]


def test_no_output_node(nodes):
    assert problems({"1": {"class_type": "Test_Number", "inputs": {"value": 1}}}, nodes) == [
        "the workflow has no output node (a node that saves or shows a result), so nothing would run"
    ]


def test_all_problems_are_reported_together(workflow, nodes):
    workflow["1"]["inputs"]["value"] = 500
    workflow["2"]["inputs"]["mode"] = "pow"
    del workflow["3"]["inputs"]["prefix"]
    workflow["5"] = {"class_type": "Nope", "inputs": {}}
    with pytest.raises(WorkflowError) as info:
        validate(workflow, nodes)
    text = str(info.value)
    assert text.startswith("the workflow has 4 problems:")
    for part in (
        "node 1 (Test_Number), input 'value'",
        "node 2 (Test_Seeded), input 'mode'",
        "node 3 (Test_SaveText), input 'prefix'",
        "node 5: unknown node type 'Nope'",
    ):
        assert part in text


def test_nodes_no_output_depends_on_are_not_checked(workflow, nodes):
    workflow["7"] = {"class_type": "Test_Number", "inputs": {"value": 1000}}  # unused and invalid
    validate(workflow, nodes)
