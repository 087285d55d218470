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
