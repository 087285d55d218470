"""The real node pack loads headless and every node's V1 interface reads as a workflow schema."""

from __future__ import annotations

from inferix_core.commands.run import load_node_classes
from inferix_core.workflow import NodeSchema


def test_pack_loads_and_schemas_parse():
    classes = load_node_classes()
    assert classes and all(name.startswith("Inferix") for name in classes)
    for name, cls in classes.items():
        schema = NodeSchema.from_class(name, cls)
        assert isinstance(getattr(cls, "FUNCTION", None), str), name
        assert all(isinstance(t, str) for t in schema.return_types), name
    assert any(NodeSchema.from_class(n, c).output_node for n, c in classes.items())


def test_ui_workflows_convert_to_their_api_twins():
    """Each example_workflows/*.json (editor format) converts to exactly its workflows/api/ twin."""
    import importlib.util
    import json
    from pathlib import Path

    from inferix_core.workflow import load_workflow

    spec = importlib.util.spec_from_file_location(
        "workflows_build", Path(__file__).parents[2] / "workflows" / "build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    # the pack's nodes, plus the interfaces of the core nodes (Load Image, Load CLIP Vision) some workflows use
    classes = {**load_node_classes(), **build.CORE_NODE_CLASSES}
    repo = Path(__file__).parents[2]
    pairs = [
        (p, repo / "workflows" / "api" / json.loads(p.read_text())["extra"]["inferix"]["api"])
        for p in (repo / "example_workflows").glob("*.json")
    ]
    assert pairs
    for ui_path, api_path in pairs:
        converted = load_workflow(ui_path, classes)
        expected = {
            k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in load_workflow(api_path).items()
        }
        assert {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in converted.items()} == expected, (
            ui_path.name
        )
