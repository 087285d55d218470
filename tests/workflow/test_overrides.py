"""--set NODE_ID.INPUT=VALUE overrides."""

from __future__ import annotations

import pytest

from inferix_core.errors import WorkflowError
from inferix_core.workflow import apply_overrides, parse_override
from inferix_core.workflow.loader import as_schemas


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.seed=42", ("3", "seed", 42)),
        ("3.scale=0.5", ("3", "scale", 0.5)),
        ("6.text=a red car", ("6", "text", "a red car")),
        ('6.text="42"', ("6", "text", "42")),
        ("6.flag=true", ("6", "flag", True)),
        ("6.size=[1, 2]", ("6", "size", [1, 2])),
        ("6.text=a=b", ("6", "text", "a=b")),
    ],
)
def test_parse(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["3seed=4", "3.seed", ".seed=4", "3.=4"])
def test_malformed(text):
    with pytest.raises(WorkflowError, match=r"NODE_ID\.INPUT=VALUE"):
        parse_override(text)


def test_apply_does_not_modify_input(workflow, nodes):
    out = apply_overrides(workflow, ["2.seed=7", "2.x=5"], as_schemas(nodes))
    assert out["2"]["inputs"]["seed"] == 7 and out["2"]["inputs"]["x"] == 5  # a link replaced by a constant
    assert workflow["2"]["inputs"]["seed"] == 4


def test_unknown_node_and_input(workflow, nodes):
    with pytest.raises(WorkflowError, match="node 8, which is not in the workflow"):
        apply_overrides(workflow, ["8.seed=1"])
    with pytest.raises(WorkflowError, match="node 2, input 'sed': Test_Seeded has no input 'sed'; did you mean 'seed'"):
        apply_overrides(workflow, ["2.sed=1"], as_schemas(nodes))
