"""Attention backends, selected by name in one table.

The default is `torch.nn.functional.scaled_dot_product_attention` (SDPA), which picks cuDNN / flash /
memory-efficient kernels on GPU and an exact math kernel on CPU. Other backends are optional extras and
are only used when asked for; an unavailable one falls back to SDPA with a logged warning.
"""

from .registry import AttentionBackend, attention_backends, get_attention_backend

__all__ = ["AttentionBackend", "attention_backends", "get_attention_backend"]
