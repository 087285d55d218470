"""The kernels' torch ops, defined on first use rather than at import, and their once-only log lines.

Why: `torch.library.triton_op` imports `torch._dynamo`, 1.7 s of every start-up (tests/test_compile_boundary.py).
An op is defined eagerly on first use, or by `register` (`compile_blocks` calls `register_kernels`) before a
trace: defining a torch op while dynamo traces is not supported, so inside a trace an op not yet defined is
reported unusable and the caller runs the modules, saying so once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ..compile_boundary import compile_boundary

logger = logging.getLogger("inferix_core.kernels")

try:  # Triton ships with CUDA builds of torch; CPU builds and some platforms have none
    import triton
except ImportError:  # pragma: no cover - depends on the install
    triton = None

_NOTED: set[str] = set()


def triton_available() -> bool:
    return triton is not None


@compile_boundary
def note_once(message: str) -> None:
    if message not in _NOTED:
        _NOTED.add(message)
        logger.info(message)


class LazyOps:
    """The torch op(s) `define()` returns, defined once; `what` names them in errors and log lines."""

    def __init__(self, what: str, define: Callable[[], object] | None):
        self.what, self._define, self._ops = what, define, None

    def register(self) -> bool:
        """Define the op(s) once; False without Triton."""
        if self._define is None:
            return False
        if self._ops is None:
            self._ops = self._define()
        return True

    def get(self):
        if self._ops is None and not self.register():
            raise RuntimeError(f"{self.what} needs Triton: pip install triton (CUDA builds of torch include it)")
        return self._ops

    def usable(self) -> bool:
        """Whether a caller may take the op now: always once defined; eagerly, defined here on first use."""
        if self._ops is not None:
            return True
        if self._define is None:
            note_once(f"Triton is not importable: {self.what} runs as the modules' separate kernels (same results)")
            return False
        if torch.compiler.is_compiling():
            note_once(
                f"{self.what} was not registered before this compile: the modules run "
                "(inferix_core.kernels.register_kernels(), which compile_blocks calls, registers it)"
            )
            return False
        return self.register()


__all__ = ["LazyOps", "note_once", "triton", "triton_available"]
