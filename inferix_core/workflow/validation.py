"""Check an API-format workflow against the node definitions before anything heavy runs.

Every problem is collected (unknown node types, missing inputs, dangling links, cycles, type
mismatches on links, values out of range, not in a choice list, or of the wrong type) and reported
together in one `WorkflowValidationError`. Semantics follow ComfyUI's `validate_inputs` in
execution.py: only nodes an output node depends on are checked input by input, and an input that the
node's VALIDATE_INPUTS takes is left to that function instead of the min/max/choice checks.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import WorkflowError
from .loader import Workflow, as_schemas
from .schema import InputSpec, NodeSchema, suggest_names, types_match

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkflowIssue:
    """One problem found in a workflow: where (node, input) and what."""

    node_id: str | None
    input_name: str | None
    message: str
    class_type: str | None = None

    def __str__(self) -> str:
        if self.node_id is None:
            return self.message
        where = f"node {self.node_id}"
        if self.class_type:
            where += f" ({self.class_type})"
        if self.input_name:
            where += f", input '{self.input_name}'"
        return f"{where}: {self.message}"


class WorkflowValidationError(WorkflowError):
    """A workflow failed validation; `issues` lists every problem found."""

    def __init__(self, issues: list[WorkflowIssue]):
        self.issues = issues
        if len(issues) == 1:
            issue = issues[0]
            super().__init__(str(issue))
            self.node_id, self.input_name = issue.node_id, issue.input_name
        else:
            lines = "\n".join(f"  - {i}" for i in issues)
            super().__init__(f"the workflow has {len(issues)} problems:\n{lines}")


def is_link(value: Any) -> bool:
    """API format marks a link as [node_id, output_index]."""
    return isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int)


def output_nodes(workflow: Workflow, schemas: Mapping[str, NodeSchema]) -> list[str]:
    """Ids of the nodes whose class is an OUTPUT_NODE."""
    return [nid for nid, n in workflow.items() if n["class_type"] in schemas and schemas[n["class_type"]].output_node]


def needed_nodes(workflow: Workflow, targets: list[str]) -> set[str]:
    """`targets` plus every node they depend on through links (links to missing nodes are skipped)."""
    seen: set[str] = set()
    stack = list(targets)
    while stack:
        nid = stack.pop()
        if nid in seen or nid not in workflow:
            continue
        seen.add(nid)
        stack.extend(v[0] for v in workflow[nid]["inputs"].values() if is_link(v))
    return seen


def validate(workflow: Workflow, node_definitions: Mapping[str, Any]) -> Workflow:
    """Check `workflow` and return a copy whose constant values are converted to their declared types.

    Args:
        workflow: API format (see `load_workflow`).
        node_definitions: class type → node class (V1 interface) or NodeSchema.

    Raises:
        WorkflowValidationError: with every problem found, each naming the node id and input.
    """
    workflow = copy.deepcopy(workflow)
    used = {n["class_type"] for n in workflow.values()}
    schemas = as_schemas({k: v for k, v in node_definitions.items() if k in used})
    issues: list[WorkflowIssue] = []

    # 1. Every node's type must be known (anywhere in the graph, as ComfyUI does).
    for nid, node in workflow.items():
        if node["class_type"] not in schemas:
            issues.append(WorkflowIssue(nid, None, _unknown_type_message(node["class_type"], node_definitions)))

    # 2. There must be something to run.
    outputs = output_nodes(workflow, schemas)
    if not outputs:
        if not issues:
            issues.append(
                WorkflowIssue(
                    None,
                    None,
                    "the workflow has no output node (a node that saves or shows a result), so nothing would run",
                )
            )
        raise WorkflowValidationError(issues)

    # 3. Inputs of every node an output depends on.
    needed = needed_nodes(workflow, outputs)
    for nid in sorted(needed, key=id_sort_key):
        node = workflow[nid]
        schema = schemas.get(node["class_type"])
        if schema is not None:
            issues.extend(_check_node(nid, node, schema, workflow, schemas, node_definitions.get(node["class_type"])))
    skipped = set(workflow) - needed
    if skipped:
        log.info("nodes not needed by any output are skipped: %s", ", ".join(sorted(skipped, key=id_sort_key)))

    # 4. No cycles.
    cycle = find_cycle(workflow, needed)
    if cycle:
        issues.append(WorkflowIssue(cycle[0], None, "the workflow has a cycle: " + " → ".join(cycle)))

    if issues:
        raise WorkflowValidationError(issues)
    return workflow


def _unknown_type_message(class_type: str, node_definitions: Mapping[str, Any]) -> str:
    known = list(node_definitions)
    close = suggest_names(class_type, known)
    lower = {k.lower(): k for k in known}
    if class_type.lower() in lower and lower[class_type.lower()] not in close:
        close.insert(0, lower[class_type.lower()])
    hint = (
        f"; did you mean {', '.join(repr(c) for c in close)}?"
        if close
        else f"; {len(known)} node types are loaded. Is the node pack that provides it installed?"
    )
    return f"unknown node type '{class_type}'{hint}"


def _check_node(
    nid: str,
    node: dict[str, Any],
    schema: NodeSchema,
    workflow: Workflow,
    schemas: Mapping[str, NodeSchema],
    node_class: Any,
) -> list[WorkflowIssue]:
    """Problems with one node's inputs; converts its constant values in place."""
    issues: list[WorkflowIssue] = []
    inputs = node["inputs"]

    def issue(name: str | None, message: str) -> None:
        issues.append(WorkflowIssue(nid, name, message, schema.class_type))

    for name in inputs:
        if schema.input(name) is None:
            log.warning(
                "node %s (%s): input '%s' is not declared by the node and is ignored", nid, schema.class_type, name
            )
    for spec in schema.inputs:
        if spec.category == "hidden":
            continue
        if spec.name not in inputs:
            if spec.category == "required":
                issue(spec.name, f"required input is missing (expected {_describe_type(spec)})")
            continue
        value = inputs[spec.name]
        if isinstance(value, list):
            message = _check_link(value, spec, workflow, schemas)
            if message:
                issue(spec.name, message)
            continue
        if isinstance(value, dict) and "__value__" in value:
            value = inputs[spec.name] = value["__value__"]  # ComfyUI's wrapper for list constants
        try:
            inputs[spec.name] = value = coerce_value(value, spec)
        except ValueError as exc:
            issue(spec.name, str(exc))
            continue
        if spec.name in schema.validate_args or schema.validate_takes_kwargs:
            continue  # the node's VALIDATE_INPUTS owns this input, as in ComfyUI
        message = check_range(value, spec)
        if message:
            issue(spec.name, message)

    if schema.has_validator and node_class is not None and not isinstance(node_class, NodeSchema):
        message = _run_validator(node_class, schema, inputs)
        if message:  # pinned on the validator's one input, as ComfyUI pins it on each input the validator names
            single = len(schema.validate_args) == 1 and not schema.validate_takes_kwargs
            issue(schema.validate_args[0] if single else None, message)
    return issues


def _check_link(value: list[Any], spec: InputSpec, workflow: Workflow, schemas: Mapping[str, NodeSchema]) -> str | None:
    """Why a linked input is wrong, or None."""
    if not is_link(value):
        return f"a link must be [node_id, output_index], got {value!r}"
    src_id, index = value
    src = workflow.get(src_id)
    if src is None:
        return f"links to node {src_id}, which is not in the workflow"
    src_schema = schemas.get(src["class_type"])
    if src_schema is None:
        return None  # already reported as an unknown type
    outs = src_schema.return_types
    if not 0 <= index < len(outs):
        listed = ", ".join(outs) if outs else "none"
        return (
            f"links to output {index} of node {src_id} ({src['class_type']}), which has {len(outs)} output(s): {listed}"
        )
    if not types_match(outs[index], spec.type_name):
        return (
            f"expects {_describe_type(spec)} but is linked to output {index} of node {src_id} "
            f"({src['class_type']}), which is {outs[index]}"
        )
    return None


def coerce_value(value: Any, spec: InputSpec) -> Any:
    """Convert a constant to the declared type, or raise ValueError saying what was wrong."""
    kind = spec.type_name

    def wrong() -> ValueError:
        return ValueError(f"expected {_describe_type(spec)}, got {type(value).__name__} {value!r}")

    if kind == "INT":
        if isinstance(value, bool):
            raise wrong()
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise wrong() from None
        raise wrong()
    if kind == "FLOAT":
        if isinstance(value, bool):
            raise wrong()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise wrong() from None
        raise wrong()
    if kind == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise wrong()
    if kind == "STRING":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # `--set 6.text=123` parses as a number
        raise wrong()
    return value  # combos and custom types: checked against choices, or passed through


def check_range(value: Any, spec: InputSpec) -> str | None:
    """Why a (converted) constant is outside min/max or not one of the choices, or None."""
    choices = spec.choices
    if choices is not None:
        if value in choices:
            return None
        shown = list(choices) if len(choices) <= 20 else f"{len(choices)} choices"
        close = suggest_names(str(value), [str(c) for c in choices])
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return f"{value!r} is not one of {shown}{hint}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = spec.options.get("min"), spec.options.get("max")
        bounds = f"allowed {lo if lo is not None else '-∞'} to {hi if hi is not None else '∞'}"
        if lo is not None and value < lo:
            return f"value {value} is below the minimum {lo} ({bounds})"
        if hi is not None and value > hi:
            return f"value {value} is above the maximum {hi} ({bounds})"
    return None


def _run_validator(node_class: Any, schema: NodeSchema, inputs: Mapping[str, Any]) -> str | None:
    """Call VALIDATE_INPUTS with the constant inputs it names; its error string, or None."""
    constants = {k: v for k, v in inputs.items() if not isinstance(v, list)}
    kwargs = (
        constants if schema.validate_takes_kwargs else {k: constants[k] for k in schema.validate_args if k in constants}
    )
    validator = node_class.VALIDATE_INPUTS
    try:
        inspect.signature(validator).bind(**kwargs)
    except TypeError:
        log.debug("%s.VALIDATE_INPUTS skipped: some of its inputs are links", schema.class_type)
        return None
    try:
        result = validator(**kwargs)
    except Exception as exc:
        return f"VALIDATE_INPUTS raised {type(exc).__name__}: {exc}"
    if result is True:
        return None
    return "custom validation failed" if result is False or result is None else str(result)


def find_cycle(workflow: Workflow, among: set[str]) -> list[str] | None:
    """A dependency cycle as [a, b, ..., a], or None.

    Iterative depth-first search (an explicit stack, not recursion): a chain of thousands of nodes is a
    valid workflow and must not hit Python's recursion limit.
    """
    color: dict[str, int] = {}  # 1 on the current path, 2 done

    def links(nid: str) -> Iterator[str]:
        for v in workflow[nid]["inputs"].values():
            if is_link(v) and v[0] in workflow and v[0] in among:
                yield v[0]

    for root in sorted(among, key=id_sort_key):
        if root in color:
            continue
        path = [root]
        stack = [links(root)]
        color[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
            elif color.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in color:
                color[nxt] = 1
                path.append(nxt)
                stack.append(links(nxt))
    return None


def _describe_type(spec: InputSpec) -> str:
    choices = spec.choices
    if choices is not None:
        return f"one of {list(choices)}" if len(choices) <= 10 else f"one of {len(choices)} choices"
    return spec.type_name


def id_sort_key(nid: str) -> tuple[int, Any]:
    return (0, int(nid)) if nid.isdigit() else (1, nid)
