"""What a node class declares about its inputs and outputs, read once into a `NodeSchema`.

A schema comes either from a V1-style node class (`INPUT_TYPES()`, `RETURN_TYPES`, `OUTPUT_NODE`, ...)
or from a running ComfyUI server's `/object_info` entry, so UI→API conversion and validation work
the same for headless runs and for `inferix queue`. No ComfyUI import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import WorkflowError

# Input types ComfyUI draws as widgets (a constant value typed in the node) rather than as sockets.
WIDGET_TYPES = frozenset({"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"})


@dataclass(frozen=True)
class InputSpec:
    """One declared input: its name, type (a type string or a list of choices) and options."""

    name: str
    type: str | tuple[Any, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    category: str = "required"  # "required" | "optional" | "hidden"

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The allowed values of a combo input, else None."""
        if isinstance(self.type, tuple):
            return self.type
        if self.type == "COMBO" and "options" in self.options:
            return tuple(self.options["options"])
        return None

    @property
    def type_name(self) -> str:
        """The socket type as a string ('COMBO' for a list of choices)."""
        return "COMBO" if isinstance(self.type, tuple) else str(self.type)

    @property
    def is_widget(self) -> bool:
        """True when the frontend shows this input as a widget (and stores its value in widgets_values)."""
        if self.category == "hidden":
            return False
        if self.options.get("forceInput") or self.options.get("rawLink"):
            return False
        return self.type_name in WIDGET_TYPES


@dataclass(frozen=True)
class NodeSchema:
    """The interface of one node class, independent of where it was read from."""

    class_type: str
    inputs: tuple[InputSpec, ...]
    return_types: tuple[str, ...]
    output_node: bool = False
    validate_args: tuple[str, ...] = ()  # parameter names of VALIDATE_INPUTS, if the class has one
    validate_takes_kwargs: bool = False

    def input(self, name: str) -> InputSpec | None:
        """The spec of input `name`, or None when the node does not declare it."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        return None

    @property
    def widget_inputs(self) -> list[InputSpec]:
        """Inputs that appear in a UI workflow's widgets_values, in declaration order."""
        return [s for s in self.inputs if s.is_widget]

    @property
    def has_validator(self) -> bool:
        return bool(self.validate_args) or self.validate_takes_kwargs

    @classmethod
    def from_class(cls, class_type: str, node_class: Any) -> NodeSchema:
        """Read the V1 interface of `node_class` (INPUT_TYPES, RETURN_TYPES, OUTPUT_NODE, VALIDATE_INPUTS)."""
        import inspect

        try:
            declared = node_class.INPUT_TYPES()
        except Exception as exc:  # a broken node class is the pack's bug, but say which one
            raise WorkflowError(f"{class_type}.INPUT_TYPES() failed: {exc}") from exc
        inputs = _inputs_from_dict(class_type, declared)
        validate_args: tuple[str, ...] = ()
        takes_kwargs = False
        validator = getattr(node_class, "VALIDATE_INPUTS", None)
        if callable(validator):
            spec = inspect.getfullargspec(validator)
            validate_args = tuple(a for a in spec.args if a not in ("self", "cls", "s"))
            takes_kwargs = spec.varkw is not None
        return cls(
            class_type=class_type,
            inputs=inputs,
            return_types=tuple(str(t) for t in getattr(node_class, "RETURN_TYPES", ())),
            output_node=bool(getattr(node_class, "OUTPUT_NODE", False)),
            validate_args=validate_args,
            validate_takes_kwargs=takes_kwargs,
        )

    @classmethod
    def from_object_info(cls, class_type: str, info: Mapping[str, Any]) -> NodeSchema:
        """Read one entry of a ComfyUI server's `/object_info` response."""
        declared = dict(info.get("input", {}))
        order = info.get("input_order")
        if order:  # newer servers say the declaration order explicitly; JSON objects keep it anyway
            for category, names in order.items():
                if category in declared:
                    section = declared[category]
                    declared[category] = {n: section[n] for n in names if n in section}
        return cls(
            class_type=class_type,
            inputs=_inputs_from_dict(class_type, declared),
            return_types=tuple(str(t) for t in info.get("output", ())),
            output_node=bool(info.get("output_node", False)),
        )


def _inputs_from_dict(class_type: str, declared: Mapping[str, Any]) -> tuple[InputSpec, ...]:
    """Flatten INPUT_TYPES()'s {required, optional, hidden} sections into InputSpecs, in order."""
    specs: list[InputSpec] = []
    for category in ("required", "optional", "hidden"):
        for name, entry in (declared.get(category) or {}).items():
            if category == "hidden":  # V1 declares "UNIQUE_ID", V3 shims ("UNIQUE_ID",)
                kind = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
                specs.append(InputSpec(name, str(kind), {}, category))
                continue
            if not isinstance(entry, (tuple, list)) or not entry:
                raise WorkflowError(
                    f"{class_type}.INPUT_TYPES() declares input '{name}' as {entry!r}; "
                    "expected (TYPE, {options}) or ([choices], {options})"
                )
            kind = entry[0]
            options = entry[1] if len(entry) > 1 and isinstance(entry[1], Mapping) else {}
            kind = tuple(kind) if isinstance(kind, (list, tuple)) else str(kind)
            specs.append(InputSpec(name, kind, dict(options), category))
    return tuple(specs)


def types_match(output_type: str, input_type: str) -> bool:
    """Whether a link from an output of `output_type` may feed an input of `input_type`.

    `*` on either side matches anything; comma-separated types match when they share one member
    (the non-strict rule of ComfyUI's comfy_execution/validation.py).
    """
    if output_type == input_type or "*" in (output_type, input_type):
        return True
    outs = {t.strip() for t in output_type.split(",")}
    ins = {t.strip() for t in input_type.split(",")}
    return bool(outs & ins) or "*" in outs or "*" in ins


def schemas_from_classes(node_classes: Mapping[str, Any]) -> dict[str, NodeSchema]:
    """NodeSchema for each entry of a NODE_CLASS_MAPPINGS-style dict (read lazily would hide errors late)."""
    return {name: NodeSchema.from_class(name, c) for name, c in node_classes.items()}


def suggest_names(word: str, options: list[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Close matches for a misspelt name, best first; near-ties only, so a shared prefix adds no noise."""
    import difflib

    scored = sorted(
        ((difflib.SequenceMatcher(None, word.lower(), o.lower()).ratio(), o) for o in options), reverse=True
    )
    scored = [(s, o) for s, o in scored if s >= cutoff]
    if not scored:
        return []
    best = scored[0][0]
    return [o for s, o in scored[:n] if s >= best - 0.08]
