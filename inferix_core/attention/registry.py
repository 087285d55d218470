"""Name → attention backend table. Layout everywhere: q, k, v of shape (B, L, H, D)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..errors import BackendUnavailableError

log = logging.getLogger(__name__)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    # (B, L, H, D) -> (B, H, L, D) for SDPA and back
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return out.transpose(1, 2)


_CUDNN_FIRST = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _sdpa_cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA with cuDNN's fused attention explicitly tried first.

    For torch versions whose SDPA order does not already pick cuDNN on Hopper. With torch 2.11 on an
    H200 it made no difference (plain SDPA already ran cuDNN's kernel; docs/performance.md). SDPA still
    falls through to the next kernel where cuDNN does not support the inputs (CPU, masks, fp32).
    """
    with sdpa_kernel(_CUDNN_FIRST, set_priority=True):
        return _sdpa(q, k, v, mask)


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    if mask is not None or q.dtype not in (torch.float16, torch.bfloat16):
        return _sdpa(q, k, v, mask)
    from flash_attn import flash_attn_func

    return flash_attn_func(q, k, v)


@dataclass(frozen=True)
class AttentionBackend:
    name: str
    attend: Callable[..., torch.Tensor]
    is_available: Callable[[], bool]
    description: str


_BACKENDS = {
    "sdpa": AttentionBackend("sdpa", _sdpa, lambda: True, "torch scaled_dot_product_attention (default, exact on CPU)"),
    "sdpa_cudnn": AttentionBackend(
        "sdpa_cudnn", _sdpa_cudnn, lambda: True, "torch SDPA with cuDNN attention explicitly first"
    ),
    "flash_attn": AttentionBackend(
        "flash_attn",
        _flash,
        lambda: torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None,
        "flash-attn 2/3 (optional extra; bf16/fp16 on CUDA only)",
    ),
}


def attention_backends() -> list[str]:
    return list(_BACKENDS)


def get_attention_backend(name: str = "sdpa", strict: bool = False) -> AttentionBackend:
    """Return the backend called `name`; unknown names raise, unavailable ones fall back to SDPA (logged)."""
    if name not in _BACKENDS:
        raise BackendUnavailableError(f"unknown attention backend '{name}'; expected one of {attention_backends()}")
    backend = _BACKENDS[name]
    if not backend.is_available():
        if strict:
            raise BackendUnavailableError(f"attention backend '{name}' is not available on this machine")
        log.warning("attention backend '%s' is not available here; using sdpa instead", name)
        return _BACKENDS["sdpa"]
    return backend
