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
    """Each workflows/X.json (editor format) converts to exactly workflows/X_api.json."""
    import importlib.util
    from pathlib import Path

    from inferix_core.workflow import load_workflow

    spec = importlib.util.spec_from_file_location(
        "workflows_build", Path(__file__).parents[2] / "workflows" / "build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    # the pack's nodes, plus the interfaces of the core nodes (Load Image, Load CLIP Vision) some workflows use
    classes = {**load_node_classes(), **build.CORE_NODE_CLASSES}
    pairs = [
        (p, p.with_name(p.stem + "_api.json"))
        for p in Path(__file__).parents[2].glob("workflows/*.json")
        if not p.stem.endswith("_api") and p.with_name(p.stem + "_api.json").is_file()
    ]
    for ui_path, api_path in pairs:
        converted = load_workflow(ui_path, classes)
        expected = {
            k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in load_workflow(api_path).items()
        }
        assert {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in converted.items()} == expected, (
            ui_path.name
        )
