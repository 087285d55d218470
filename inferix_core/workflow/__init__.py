"""Headless ComfyUI-workflow machinery: load, validate and execute API-format workflows.

Framework-free: node classes are passed in (anything with the V1 interface: INPUT_TYPES,
RETURN_TYPES, FUNCTION, OUTPUT_NODE), and ComfyUI is never imported.
"""

from .executor import OUTPUT_DIR_ENV, ExecutionResult, execute, execution_order
from .loader import load_workflow
from .overrides import apply_overrides, parse_override
from .progress import (
    NullProgress,
    ProgressHook,
    TqdmProgress,
    check_interrupt,
    clear_interrupt,
    current_progress,
    request_interrupt,
    use_progress,
)
from .schema import InputSpec, NodeSchema, types_match
from .ui_format import convert_ui_workflow, is_ui_workflow
from .validation import WorkflowIssue, WorkflowValidationError, validate

__all__ = [
    "OUTPUT_DIR_ENV",
    "ExecutionResult",
    "InputSpec",
    "NodeSchema",
    "NullProgress",
    "ProgressHook",
    "TqdmProgress",
    "WorkflowIssue",
    "WorkflowValidationError",
    "apply_overrides",
    "check_interrupt",
    "clear_interrupt",
    "convert_ui_workflow",
    "current_progress",
    "execute",
    "execution_order",
    "is_ui_workflow",
    "load_workflow",
    "parse_override",
    "request_interrupt",
    "types_match",
    "use_progress",
    "validate",
]
