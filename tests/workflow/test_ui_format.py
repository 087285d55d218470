"""UI-format (editor) workflows convert to API format when the node definitions are known."""

from __future__ import annotations

import pytest

from inferix_core.errors import WorkflowError
from inferix_core.workflow import load_workflow


def ui_node(node_id, kind, widgets=None, inputs=(), outputs=(), mode=0):
    return {
        "id": node_id,
        "type": kind,
        "mode": mode,
        "widgets_values": widgets,
        "inputs": [{"name": n, "type": t, "link": link} for n, t, link in inputs],
        "outputs": [{"name": t, "type": t, "links": []} for t in outputs],
    }


def ui_workflow():
    # 1 Number(3) ─(link 1)→ 5 Reroute ─(link 2)→ 2 Seeded ─(link 3)→ 3 SaveText
    # 4 PrimitiveNode feeds Seeded.bias through link 4.
    return {
        "nodes": [
            ui_node(1, "Test_Number", [3], outputs=["INT"]),
            ui_node(5, "Reroute", None, inputs=[("", "*", 1)], outputs=["INT"]),
            # widgets: seed, its control_after_generate companion, mode, scale, bias (linked, value kept)
            ui_node(
                2,
                "Test_Seeded",
                [4, "randomize", "mul", 0.5, 0],
                inputs=[("x", "INT", 2), ("bias", "INT", 4)],
                outputs=["INT"],
            ),
            ui_node(4, "PrimitiveNode", [2, "fixed"], outputs=["INT"]),
            ui_node(3, "Test_SaveText", ["final"], inputs=[("value", "*", 3)]),
            ui_node(9, "Note", ["just a comment"]),
        ],
        "links": [[1, 1, 0, 5, 0, "INT"], [2, 5, 0, 2, 0, "INT"], [3, 2, 0, 3, 0, "INT"], [4, 4, 0, 2, 4, "INT"]],
    }


def test_converts_widgets_links_reroutes_and_primitives(nodes):
    api = load_workflow(ui_workflow(), nodes)
    assert api == {
        "1": {"class_type": "Test_Number", "inputs": {"value": 3}},
        "2": {
            "class_type": "Test_Seeded",
            "inputs": {"x": ["1", 0], "seed": 4, "mode": "mul", "scale": 0.5, "bias": 2},
        },
        "3": {"class_type": "Test_SaveText", "inputs": {"prefix": "final", "value": ["2", 0]}},
    }


def test_explicit_control_after_generate_false_means_no_companion(nodes):
    class NoControl:
        @classmethod
        def INPUT_TYPES(cls):  # noqa: N802 - ComfyUI V1 interface
            return {"required": {"seed": ("INT", {"control_after_generate": False}), "steps": ("INT", {})}}

        RETURN_TYPES = ()
        FUNCTION = "f"
        OUTPUT_NODE = True

    ui = {"nodes": [ui_node(1, "NoControl", [7, 9])], "links": []}
    assert load_workflow(ui, {"NoControl": NoControl})["1"]["inputs"] == {"seed": 7, "steps": 9}


def test_bypassed_node_passes_its_input_through(nodes):
    ui = ui_workflow()
    ui["nodes"][2]["mode"] = 4  # bypass Seeded: SaveText should read Number through the reroute
    api = load_workflow(ui, nodes)
    assert "2" not in api
    assert api["3"]["inputs"]["value"] == ["1", 0]


def test_muted_node_is_dropped(nodes):
    ui = ui_workflow()
    ui["nodes"][0]["mode"] = 2
    api = load_workflow(ui, nodes)
    assert "1" not in api and "x" not in api["2"]["inputs"]


def test_unknown_types_refused_with_export_hint(nodes):
    ui = ui_workflow()
    ui["nodes"][0]["type"] = "KSampler"
    with pytest.raises(WorkflowError, match=r"KSampler.*Workflow → Export \(API\)"):
        load_workflow(ui, nodes)


def test_ui_format_without_definitions_is_refused(nodes):
    with pytest.raises(WorkflowError, match=r"UI-format workflow.*Export \(API\)"):
        load_workflow(ui_workflow(), None)


def test_request_body_and_int_ids_are_accepted(nodes):
    api = load_workflow(
        {
            "prompt": {
                1: {"class_type": "Test_Number", "inputs": {"value": 1}},
                2: {"class_type": "Test_SaveText", "inputs": {"value": [1, 0], "prefix": "a"}},
            }
        }
    )
    assert api["2"]["inputs"]["value"] == ["1", 0]


def test_not_a_workflow(nodes):
    with pytest.raises(WorkflowError, match="node 1: not an API-format node"):
        load_workflow({"1": 5})
