"""`--set NODE_ID.INPUT=VALUE` overrides applied to an API-format workflow.

VALUE is parsed as JSON when it parses (`5`, `0.5`, `true`, `"text"`, `[1, 2]`), else taken as a
plain string, so `--set 6.text=a red car` needs no quoting beyond the shell's.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import WorkflowError
from .schema import NodeSchema, suggest_names

log = logging.getLogger(__name__)


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split 'NODE_ID.INPUT=VALUE' into (node_id, input_name, value)."""
    target, sep, raw = text.partition("=")
    node_id, dot, input_name = target.strip().partition(".")
    if not sep or not dot or not node_id or not input_name:
        raise WorkflowError(f"override '{text}' is not of the form NODE_ID.INPUT=VALUE (e.g. --set 3.seed=42)")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return node_id, input_name.strip(), value


def apply_overrides(
    workflow: Mapping[str, Mapping[str, Any]],
    overrides: Iterable[str | tuple[str, str, Any]] | Mapping[str, Any] | None,
    schemas: Mapping[str, NodeSchema] | None = None,
) -> dict[str, dict[str, Any]]:
    """Return a copy of `workflow` with each override's value set as a constant input.

    Args:
        overrides: 'ID.INPUT=VALUE' strings, (id, input, value) triples, or {'ID.INPUT': value}.
        schemas: when given, an input name the node does not declare is refused with suggestions.
    """
    result = copy.deepcopy(dict(workflow))
    if not overrides:
        return result
    if isinstance(overrides, Mapping):
        items = [(*_split_key(k), v) for k, v in overrides.items()]
    else:
        items = [parse_override(o) if isinstance(o, str) else tuple(o) for o in overrides]
    for node_id, input_name, value in items:
        node_id = str(node_id)
        if node_id not in result:
            close = suggest_names(node_id, list(result))
            hint = f"; did you mean {', '.join(close)}?" if close else f"; node ids are {', '.join(sorted(result))}"
            raise WorkflowError(f"--set targets node {node_id}, which is not in the workflow{hint}")
        node = result[node_id]
        schema = (schemas or {}).get(node["class_type"])
        if schema is not None and schema.input(input_name) is None:
            names = [s.name for s in schema.inputs if s.category != "hidden"]
            close = suggest_names(input_name, names)
            hint = (
                f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"its inputs are {', '.join(names)}"
            )
            raise WorkflowError(
                f"{node['class_type']} has no input '{input_name}'; {hint}", node_id=node_id, input_name=input_name
            )
        previous = node["inputs"].get(input_name)
        if isinstance(previous, list) and len(previous) == 2:
            log.info("--set %s.%s replaces the link from node %s with a constant", node_id, input_name, previous[0])
        node["inputs"][input_name] = value
        log.debug("override %s.%s = %r", node_id, input_name, value)
    return result


def _split_key(key: str) -> tuple[str, str]:
    node_id, dot, input_name = str(key).partition(".")
    if not dot:
        raise WorkflowError(f"override key '{key}' is not of the form NODE_ID.INPUT")
    return node_id, input_name
