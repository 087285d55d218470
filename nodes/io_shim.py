"""A small, faithful stand-in for the subset of ComfyUI's V3 `comfy_api.latest.io` that our nodes use.

It is used only where `comfy_api.latest` is not importable: headless (`inferix run`, tests) and inside
an old ComfyUI that predates the V3 API. There our classes must look like plain V1 nodes, so every
V1 attribute (INPUT_TYPES, RETURN_TYPES, FUNCTION, OUTPUT_NODE, CATEGORY, VALIDATE_INPUTS, ...) is an
ordinary class attribute set when the class is created. Semantics follow ComfyUI
`comfy_api/latest/_io.py` (Schema.finalize/get_v1_info, EXECUTE_NORMALIZED, NodeOutput.from_dict);
it deliberately leaves out dynamic inputs, lazy evaluation, async execute and node expansion.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar


def _prune(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


class Input:
    """Base input: an id, a V1 category (required/optional) and a tooltip."""

    io_type: ClassVar[str] = "*"

    def __init__(
        self,
        id: str,
        display_name: str | None = None,
        optional: bool = False,
        tooltip: str | None = None,
        lazy: bool | None = None,
        extra_dict: dict | None = None,
        **options: Any,
    ):
        self.id = id
        self.display_name = display_name
        self.optional = optional
        self.tooltip = tooltip
        self.lazy = lazy
        unknown = set(options) - _WIDGET_OPTIONS.get(self.io_type, set())
        if unknown:  # the real constructors have fixed keyword lists; fail the same way on a typo
            raise TypeError(f"{type(self).__qualname__}() got unexpected keyword arguments {sorted(unknown)}")
        # widget options (default, min, max, step, multiline, control_after_generate, ...) as V1 spells them
        self.options = {_V1_NAMES.get(k, k): v for k, v in options.items()}
        self.extra_dict = extra_dict or {}

    def as_dict(self) -> dict:
        return _prune(
            {
                "display_name": self.display_name,
                "optional": self.optional or None,
                "tooltip": self.tooltip,
                "lazy": self.lazy,
                **self.options,
            }
        ) | _prune(self.extra_dict)

    def get_io_type(self) -> str | list:
        return self.io_type


class Output:
    """Base output: id, display name, tooltip."""

    io_type: ClassVar[str] = "*"

    def __init__(
        self,
        id: str | None = None,
        display_name: str | None = None,
        tooltip: str | None = None,
        is_output_list: bool = False,
    ):
        self.id = id
        self.display_name = display_name
        self.tooltip = tooltip
        self.is_output_list = is_output_list


_COMMON = {"default", "socketless", "force_input"}
_WIDGET_OPTIONS = {
    "INT": _COMMON | {"min", "max", "step", "control_after_generate", "display_mode"},
    "FLOAT": _COMMON | {"min", "max", "step", "round", "display_mode"},
    "STRING": _COMMON | {"multiline", "placeholder", "dynamic_prompts"},
    "BOOLEAN": _COMMON | {"label_on", "label_off"},
    "COMBO": {"default", "socketless", "control_after_generate"},
}
# keyword names that differ between the V3 constructors and the V1 option dicts
_V1_NAMES = {"display_mode": "display", "dynamic_prompts": "dynamicPrompts", "force_input": "forceInput"}


def _comfytype(io_type: str, name: str) -> type:
    """Build a ComfyType class with nested Input/Output bound to `io_type` (like `@comfytype`)."""
    inp = type("Input", (Input,), {"io_type": io_type})
    out = type("Output", (Output,), {"io_type": io_type})
    return type(name, (), {"io_type": io_type, "Input": inp, "Output": out})


class _ComboInput(Input):
    io_type = "COMBO"

    def __init__(self, id: str, options: list | type[Enum] | None = None, **kwargs: Any):
        if isinstance(options, type) and issubclass(options, Enum):
            options = [v.value for v in options]
        if isinstance(kwargs.get("default"), Enum):
            kwargs["default"] = kwargs["default"].value
        super().__init__(id, **kwargs)
        self.choices = list(options or [])

    def get_io_type(self) -> list:
        # Old ComfyUI (the only place this shim meets a loader) spells a combo as its list of options.
        return list(self.choices)


Int = _comfytype("INT", "Int")
Float = _comfytype("FLOAT", "Float")
String = _comfytype("STRING", "String")
Boolean = _comfytype("BOOLEAN", "Boolean")
Image = _comfytype("IMAGE", "Image")
Mask = _comfytype("MASK", "Mask")
Latent = _comfytype("LATENT", "Latent")
Conditioning = _comfytype("CONDITIONING", "Conditioning")
Vae = _comfytype("VAE", "Vae")
ClipVision = _comfytype("CLIP_VISION", "ClipVision")
ClipVisionOutput = _comfytype("CLIP_VISION_OUTPUT", "ClipVisionOutput")
Model = _comfytype("MODEL", "Model")
Video = _comfytype("VIDEO", "Video")
Combo = type(
    "Combo", (), {"io_type": "COMBO", "Input": _ComboInput, "Output": type("Output", (Output,), {"io_type": "COMBO"})}
)


def Custom(io_type: str) -> type:  # noqa: N802 - same name as comfy_api.latest.io.Custom
    """A ComfyType for a custom socket type."""
    return _comfytype(io_type, "CustomComfyType")


class Hidden(str, Enum):
    """Hidden inputs a node may ask for; V1 passes them as keyword arguments named after the member."""

    unique_id = "UNIQUE_ID"
    prompt = "PROMPT"
    extra_pnginfo = "EXTRA_PNGINFO"
    dynprompt = "DYNPROMPT"


class HiddenHolder:
    """Values of the hidden inputs of one execution; missing ones read as None."""

    def __init__(self, **values: Any):
        self.__dict__.update(values)

    def __getattr__(self, key: str) -> Any:
        return None


@dataclass
class Schema:
    """Definition of a node, as in `comfy_api.latest.io.Schema`."""

    node_id: str
    display_name: str | None = None
    category: str = "sd"
    inputs: list | None = None
    outputs: list | None = None
    hidden: list | None = None
    description: str = ""
    is_input_list: bool = False
    is_output_node: bool = False
    is_deprecated: bool = False
    is_experimental: bool = False
    is_api_node: bool = False
    not_idempotent: bool = False
    enable_expand: bool = False

    def validate(self) -> None:
        ids = [i.id for i in self.inputs or []] + [o.id for o in self.outputs or []]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"Input and output ids must be unique, but {dupes} are not.")

    def finalize(self) -> None:
        if self.is_output_node:
            self.hidden = list(self.hidden or [])
            for h in (Hidden.prompt, Hidden.extra_pnginfo):
                if h not in self.hidden:
                    self.hidden.append(h)
        for i, output in enumerate(self.outputs or []):
            if output.id is None:
                output.id = f"_{i}_{output.io_type}_"

    def v1_inputs(self, include_hidden: bool = True) -> dict:
        spec: dict[str, dict] = {"required": {}}
        for i in self.inputs or []:
            opts = i.as_dict()
            opts.pop("optional", None)
            spec.setdefault("optional" if i.optional else "required", {})[i.id] = (i.get_io_type(), opts)
        if include_hidden and self.hidden:
            spec["hidden"] = {h.name: (h.value,) for h in self.hidden}
        return spec


class NodeOutput:
    """Outputs of one execution, plus an optional `ui` dict for the front end."""

    def __init__(self, *args: Any, ui: Any = None, expand: dict | None = None, block_execution: str | None = None):
        self.args = args
        self.ui = ui
        self.expand = expand
        self.block_execution = block_execution

    @property
    def result(self) -> tuple | None:
        return self.args if len(self.args) > 0 else None

    @classmethod
    def from_dict(cls, data: dict) -> NodeOutput:
        return cls(*data.get("result", ()), ui=data.get("ui"), expand=data.get("expand"))

    def __getitem__(self, index: int) -> Any:
        return self.args[index]


class ComfyNode:
    """Base class of a node: subclasses define `define_schema()` and `execute()` as classmethods.

    When a subclass is created, its schema is read once to set the V1 attributes as plain class
    attributes; INPUT_TYPES re-reads the schema on each call, as V3 does, so file lists stay fresh.
    """

    SCHEMA: ClassVar[Schema | None] = None
    hidden: ClassVar[HiddenHolder] = HiddenHolder()
    FUNCTION: ClassVar[str] = "EXECUTE_NORMALIZED"

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "define_schema" not in cls.__dict__:
            return  # an execution clone or an abstract intermediate class
        schema = cls.define_schema()
        schema.finalize()
        schema.validate()
        outputs = schema.outputs or []
        cls.SCHEMA = schema
        cls.CATEGORY = schema.category
        cls.DESCRIPTION = schema.description
        cls.OUTPUT_NODE = schema.is_output_node
        cls.INPUT_IS_LIST = schema.is_input_list
        cls.NOT_IDEMPOTENT = schema.not_idempotent
        cls.EXPERIMENTAL = schema.is_experimental
        cls.DEPRECATED = schema.is_deprecated
        cls.RETURN_TYPES = tuple(o.io_type for o in outputs)
        cls.RETURN_NAMES = tuple(o.display_name or o.io_type for o in outputs)
        cls.OUTPUT_IS_LIST = tuple(o.is_output_list for o in outputs)
        cls.OUTPUT_TOOLTIPS = tuple(o.tooltip for o in outputs)
        # V1 loaders read the argument names of VALIDATE_INPUTS to decide what to pass; alias the
        # classmethod itself so the names are exactly those of validate_inputs.
        if "validate_inputs" in cls.__dict__:
            cls.VALIDATE_INPUTS = cls.validate_inputs
        if "fingerprint_inputs" in cls.__dict__:
            cls.IS_CHANGED = cls.fingerprint_inputs

    @classmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError

    @classmethod
    def execute(cls, **kwargs: Any) -> NodeOutput:
        raise NotImplementedError

    @classmethod
    def INPUT_TYPES(cls, include_hidden: bool = True, return_schema: bool = False) -> dict | tuple[dict, Schema]:  # noqa: N802
        schema = cls.define_schema()
        schema.finalize()
        spec = schema.v1_inputs(include_hidden)
        return (spec, schema) if return_schema else spec

    @classmethod
    def GET_SCHEMA(cls) -> Schema:  # noqa: N802
        return cls.SCHEMA

    @classmethod
    def EXECUTE_NORMALIZED(cls, *args: Any, **kwargs: Any) -> tuple | dict:  # noqa: N802
        """Run `execute` and return what a V1 executor expects: a tuple, or {"result", "ui"}."""
        hidden = {h.name: kwargs.pop(h.name, None) for h in cls.SCHEMA.hidden or []}
        clone = type(cls.__name__, (cls,), {"hidden": HiddenHolder(**hidden), "__module__": cls.__module__})
        out = clone.execute(*args, **kwargs)
        if out is None:
            out = NodeOutput()
        elif isinstance(out, tuple):
            out = NodeOutput(*out)
        elif isinstance(out, dict):
            out = NodeOutput.from_dict(out)
        elif not isinstance(out, NodeOutput):
            raise TypeError(f"{cls.__name__}.execute returned {type(out).__name__}; expected io.NodeOutput")
        ui = out.ui.as_dict() if hasattr(out.ui, "as_dict") else out.ui
        result = tuple(out.args)
        return {"result": result, "ui": ui} if ui is not None else result


class ComfyExtension:
    """Stand-in for `comfy_api.latest.ComfyExtension` (unused by our loader, kept for symmetry)."""

    async def on_load(self) -> None:
        return None

    async def get_node_list(self) -> list[type[ComfyNode]]:
        return []


def accepted_arguments(fn: Any) -> list[str]:
    """Argument names of a (class)method, as a V1 loader reads them via getfullargspec."""
    return inspect.getfullargspec(fn).args
