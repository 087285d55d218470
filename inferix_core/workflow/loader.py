"""Read a workflow file into API format (`{node_id: {class_type, inputs}}`).

Accepts API format, a `/prompt` request body (`{"prompt": {...}}`) and, when node definitions are
given, the editor's UI format. Checks only the shape of the JSON; `validate` checks it against the
node definitions.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import MissingFileError, WorkflowError
from .schema import NodeSchema
from .ui_format import EXPORT_HINT, check_ui_shape, convert_ui_workflow, is_ui_workflow

log = logging.getLogger(__name__)

Workflow = dict[str, dict[str, Any]]


def as_schemas(node_definitions: Mapping[str, Any] | None) -> dict[str, NodeSchema]:
    """NodeSchema per class type, from node classes or ready-made NodeSchemas (mixed is fine)."""
    schemas: dict[str, NodeSchema] = {}
    for name, value in (node_definitions or {}).items():
        schemas[name] = value if isinstance(value, NodeSchema) else NodeSchema.from_class(name, value)
    return schemas


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, with errors that name the file and the position."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"workflow file '{path}' does not exist")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WorkflowError(f"'{path}' is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except UnicodeDecodeError as exc:
        raise WorkflowError(f"'{path}' is not a UTF-8 text file: {exc}") from exc


def load_workflow(
    path_or_dict: str | Path | Mapping[str, Any], node_definitions: Mapping[str, Any] | None = None
) -> Workflow:
    """Return an API-format workflow (a deep copy; the input is never modified).

    Args:
        path_or_dict: a path to a .json file or the parsed JSON.
        node_definitions: class type → node class (V1 interface) or NodeSchema; needed only to
            convert a UI-format workflow.

    Raises:
        WorkflowError: the JSON is neither API nor UI format, or UI format without definitions.
        MissingFileError: the path does not exist.
    """
    data = read_json(path_or_dict) if isinstance(path_or_dict, (str, Path)) else copy.deepcopy(path_or_dict)
    if not isinstance(data, Mapping):
        raise WorkflowError(f"a workflow must be a JSON object, got {type(data).__name__}")
    if is_ui_workflow(data):
        check_ui_shape(data)
        types = {n["type"] for n in data["nodes"]}
        schemas = {}
        if node_definitions:
            schemas = as_schemas({k: v for k, v in node_definitions.items() if k in types})
        if not schemas and any(t not in ("Note", "MarkdownNote") for t in types):
            raise WorkflowError(
                "this is a UI-format workflow (it has 'nodes' and 'links'); it can only be "
                "converted when its node definitions are known. " + EXPORT_HINT
            )
        try:
            return convert_ui_workflow(data, schemas)
        except (TypeError, KeyError, AttributeError, ValueError, IndexError, RecursionError) as exc:
            # a shape check_ui_shape does not cover (links, reroute chains): still one line, not a traceback
            raise WorkflowError(
                f"the UI-format workflow is malformed ({type(exc).__name__}: {str(exc)[:120]}). {EXPORT_HINT}"
            ) from None
    if "prompt" in data and isinstance(data["prompt"], Mapping):
        data = data["prompt"]  # the body of a POST /prompt request
    return _check_api_shape(dict(data))


def _check_api_shape(data: dict[str, Any]) -> Workflow:
    """Check every entry is `{class_type: str, inputs: dict}` and normalise node ids to strings."""
    if not data:
        raise WorkflowError("the workflow is empty")
    workflow: Workflow = {}
    for node_id, node in data.items():
        if not isinstance(node, Mapping) or "class_type" not in node:
            raise WorkflowError(
                "not an API-format node: expected an object with 'class_type' and 'inputs'. "
                "If this file came from the editor's Save, " + EXPORT_HINT,
                node_id=str(node_id),
            )
        if not isinstance(node["class_type"], str):
            raise WorkflowError(f"class_type must be a string, got {node['class_type']!r}", node_id=str(node_id))
        inputs = node.get("inputs", {})
        if not isinstance(inputs, Mapping):
            raise WorkflowError(f"'inputs' must be an object, got {type(inputs).__name__}", node_id=str(node_id))
        entry = dict(node)
        entry["inputs"] = {
            name: [str(v[0]), v[1]] if isinstance(v, list) and len(v) == 2 and isinstance(v[0], (str, int)) else v
            for name, v in inputs.items()
        }
        workflow[str(node_id)] = entry
    return workflow
