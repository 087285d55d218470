"""Functions `torch.compile` must leave eager, marked without importing `torch._dynamo` at start-up.

`torch.compiler.disable` imports `torch._dynamo`, which costs ~1.7 s of a CPU start-up (more than
`import torch` itself) that an eager run never needs. `compile_boundary` marks such a function at once
when dynamo is already loaded (ComfyUI, a compiled run) and otherwise leaves it as it is and notes where
it lives (a class attribute or a module global). `mark_compile_boundaries()`, called by every place that
compiles (`compile_blocks`, the VAE's compiled regions), then puts the `torch.compiler.disable`d function
in that place before the first trace, so dynamo sees exactly what an immediate decorator gives (no
wrapper frame of ours to trace or guard). Code that compiles these modules some other way calls
`mark_compile_boundaries()` first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

_PENDING: list[tuple[Any, str, Callable]] = []  # (class or module globals, name, function)


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


class _DeferredMethod:
    """A method to be disabled later: learns its class and name from `__set_name__`, binds as a function."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__doc__, self.__wrapped__ = fn.__doc__, fn

    def __set_name__(self, owner: type, name: str) -> None:
        _PENDING.append((owner, name, self.fn))
        setattr(owner, name, self.fn)  # a plain function again until marked: no descriptor on the call path

    def __get__(self, obj, owner=None):  # only before __set_name__ has run
        return self.fn.__get__(obj, owner)


def compile_boundary(fn: Callable) -> Any:
    """`torch.compiler.disable(fn)`, deferred until something compiles if dynamo is not loaded yet.

    Deferred for methods (defined in a class body) and module-level functions (called by their global name);
    a function local to another is disabled at once.
    """
    qualname = fn.__qualname__.replace(".<locals>.", "<locals>")
    if _dynamo_loaded() or ("<locals>" in qualname and "." not in qualname):  # a local function has no place to swap
        return torch.compiler.disable(fn)
    if "." in qualname:  # defined in a class body
        return _DeferredMethod(fn)
    _PENDING.append((fn.__globals__, fn.__name__, fn))
    return fn


def mark_compile_boundaries() -> None:
    """Put the disabled version of every deferred boundary in its place (imports dynamo); idempotent."""
    while _PENDING:
        place, name, fn = _PENDING.pop()
        disabled = torch.compiler.disable(fn)
        if isinstance(place, dict):
            if place.get(name) is fn:  # a module global, unless something replaced it (a test's monkeypatch)
                place[name] = disabled
        elif place.__dict__.get(name) is fn:
            setattr(place, name, disabled)


def is_marked(fn: Callable) -> bool:
    """True when dynamo will not trace into `fn` (for tests and diagnostics)."""
    return bool(getattr(fn, "_torchdynamo_disable", False))
