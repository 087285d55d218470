"""Triton kernels for fusions no kernel library we depend on provides; each has an unfused twin in the modules.

Their torch ops are defined on first use, or by `register_kernels` before a compile: `torch.library.triton_op`
imports `torch._dynamo`, which would cost every start-up 1.7 s (tests/test_compile_boundary.py).
"""

from __future__ import annotations


def register_kernels() -> bool:
    """Define every kernel's torch op (once); False when Triton is not importable."""
    from . import layer_norm_modulate, qk_norm_rope

    return qk_norm_rope.register() and layer_norm_modulate.register()


__all__ = ["register_kernels"]
