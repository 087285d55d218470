"""Functions `torch.compile` must leave eager, marked without importing `torch._dynamo` at start-up.

`torch.compiler.disable` imports `torch._dynamo`, which costs ~1.7 s of a CPU start-up (more than
`import torch` itself) that an eager run never needs. `compile_boundary` marks such a function at once
when dynamo is already loaded (ComfyUI, a compiled run) and otherwise wraps it so that
`mark_compile_boundaries()`, called by every place that compiles (`compile_blocks`, the VAE's
compiled regions), disables it before the first trace. Code that compiles these modules some other
way calls `mark_compile_boundaries()` first.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)

_PENDING: list[dict[str, Callable]] = []


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def compile_boundary(fn: F) -> F:
    """`torch.compiler.disable(fn)`, deferred until something compiles if dynamo is not loaded yet."""
    if _dynamo_loaded():
        return torch.compiler.disable(fn)
    target = {"fn": fn}

    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        return target["fn"](*args, **kwargs)

    boundary.__compile_boundary__ = target  # type: ignore[attr-defined]
    _PENDING.append(target)
    return boundary  # type: ignore[return-value]


def mark_compile_boundaries() -> None:
    """Disable every deferred boundary for dynamo (imports it); cheap and idempotent after the first call."""
    while _PENDING:
        target = _PENDING.pop()
        target["fn"] = torch.compiler.disable(target["fn"])


def is_marked(fn: Callable) -> bool:
    """True when dynamo will not trace into `fn` (for tests and diagnostics)."""
    target = getattr(fn, "__compile_boundary__", None)
    inner = target["fn"] if target is not None else fn
    return bool(getattr(inner, "_torchdynamo_disable", False))
