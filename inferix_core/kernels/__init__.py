"""Triton kernels for fusions no kernel library we depend on provides; each has an unfused twin in the modules.

Their torch ops are defined on first use, or by `register_kernels` before a compile, not at import (`lazy_ops`).
"""

from __future__ import annotations


def register_kernels() -> bool:
    """Define every kernel's torch op (once); False when Triton is not importable."""
    from . import layer_norm_modulate, qk_norm_rope

    return qk_norm_rope.OPS.register() and layer_norm_modulate.OPS.register()


__all__ = ["register_kernels"]
