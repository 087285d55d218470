"""Name → attention backend table. Layout everywhere: q, k, v of shape (B, L, H, D)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..compile_boundary import compile_boundary
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


# -- FlashAttention-4 (`flash-attn-4` on PyPI, CuTe DSL; the `fa4` extra) ------------------------------------
@dataclass(frozen=True)
class FA4Crossover:
    """From how many keys FlashAttention-4 beats cuDNN SDPA, measured on one GPU kind and head size."""

    compute_capability: tuple[int, int]
    head_dim: int
    min_keys: int  # FA4 for calls attending to at least this many keys, SDPA below
    source: str


# Measured, not guessed: a shape with no row here runs SDPA (logged once), so FA4 only runs where it was
# seen to pay. Issue #19, H200 (sm_90), torch 2.11, bf16, q = one 3-frame block of 4,680 tokens, 12 × 128
# heads: 596 vs 511 TFLOP/s at 32,760 keys (1.58 vs 1.85 ms), equal at 14,040, 9 % slower at 4,680; max
# |diff| vs SDPA 2e-4…1e-3. Equal is not a gain, so the crossover is taken just above 14,040 keys.
FA4_CROSSOVERS: tuple[FA4Crossover, ...] = (
    FA4Crossover((9, 0), 128, 14_041, "issue #19: H200, torch 2.11, flash-attn-4 4.0.0b36, bf16, q 4680 tokens"),
)
FA4_DTYPES = (torch.float16, torch.bfloat16)
_FA4: dict[str, object] = {}  # "available": bool, filled by _fa4_available() outside any compiled region
_NOTED: set[str] = set()
BELOW_CROSSOVER = "fewer keys than the measured crossover"  # the table's choice, not a fallback: not logged


def _fa4_importable() -> bool:
    """Whether `flash_attn.cute.interface.flash_attn_func` imports (flash-attn-4 ships `flash_attn.cute`).

    Imported here, once, rather than only looked up: its dependencies (nvidia-cutlass-dsl, quack-kernels, …)
    fail at import time when missing, and a failure inside a model call would stop the run.
    """
    try:
        if importlib.util.find_spec("flash_attn") is None:
            return False
        from flash_attn.cute.interface import flash_attn_func  # noqa: F401
    except Exception as exc:  # a missing or broken install (ImportError, a CUDA/DSL error): not available
        log.info("flash_attn.cute does not import (%s: %s)", type(exc).__name__, str(exc)[:200])
        return False
    return True


def _fa4_available() -> bool:
    """flash_attn.cute importable and a GPU it has kernels for (sm_90 / sm_100 / sm_110)."""
    if "available" not in _FA4:
        cc = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
        _FA4["cc"] = cc  # read by fa4_choice: no device query inside a compiled region
        _FA4["available"] = cc[0] in (9, 10, 11) and _fa4_importable()
    return bool(_FA4["available"])


def fa4_crossover(compute_capability: tuple[int, int], head_dim: int) -> FA4Crossover | None:
    """The measured row for this GPU and head size, or None (then SDPA)."""
    for row in FA4_CROSSOVERS:
        if row.compute_capability == tuple(compute_capability) and row.head_dim == head_dim:
            return row
    return None


def fa4_choice(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, force: bool = False) -> str | None:
    """None if this call should run FlashAttention-4, else why SDPA runs it instead (q, k: (B, L, H, D))."""
    return fa4_choice_for(k.shape[1], q.shape[-1], q.dtype, q.device.type, mask is not None, force)


def fa4_choice_for(
    keys: int, head_dim: int, dtype: torch.dtype, device_type: str, masked: bool = False, force: bool = False
) -> str | None:
    """The per-shape choice: None = FlashAttention-4, else the reason for SDPA.

    Reasons that mean "FA4 cannot" (not installed, a mask, fp32, CPU, no measurement) are logged once by
    the caller; BELOW_CROSSOVER (fewer keys than the measured crossover) is the table doing its job.
    """
    if not _FA4.get("available", False):
        return "flash-attn-4 is not installed or this GPU has no FA4 kernels (pip install '.[fa4]'; sm_90+)"
    if masked:
        return "FA4 takes no attention mask here"
    if dtype not in FA4_DTYPES or device_type != "cuda":
        return f"FA4 runs bf16/fp16 on CUDA only (got {dtype} on {device_type})"
    if force:
        return None
    cc = _FA4["cc"]
    row = fa4_crossover(cc, head_dim)
    if row is None:
        return f"no FA4 measurement for sm_{cc[0]}{cc[1]} with head_dim {head_dim} (FA4_CROSSOVERS)"
    if keys < row.min_keys:
        return BELOW_CROSSOVER
    return None


@compile_boundary
def _note_once(reason: str) -> None:
    if reason not in _NOTED:
        _NOTED.add(reason)
        log.warning("flash_attn_4: %s; using sdpa for these calls", reason)


@compile_boundary
def _fa4_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """flash_attn.cute.interface.flash_attn_func (B, L, H, D) layout; it returns (out, lse) or out by version."""
    from flash_attn.cute.interface import flash_attn_func

    out = flash_attn_func(q, k, v)
    return out[0] if isinstance(out, tuple) else out


def _flash4(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """FlashAttention-4 where the measured table says it is faster for this many keys, SDPA elsewhere."""
    reason = fa4_choice(q, k, mask)
    if reason is None:
        return _fa4_call(q, k, v)
    if reason != BELOW_CROSSOVER:
        _note_once(reason)
    return _sdpa(q, k, v, mask)


def _flash4_force(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """FlashAttention-4 for every call it can run, whatever the table says (to measure a new table row)."""
    reason = fa4_choice(q, k, mask, force=True)
    if reason is None:
        return _fa4_call(q, k, v)
    _note_once(reason)
    return _sdpa(q, k, v, mask)


@dataclass(frozen=True)
class AttentionBackend:
    name: str
    attend: Callable[..., torch.Tensor]
    is_available: Callable[[], bool]
    description: str


AUTO = "auto"  # the default: resolved by get_attention_backend to flash_attn_4 or sdpa
BACKENDS = {
    "sdpa": AttentionBackend("sdpa", _sdpa, lambda: True, "torch scaled_dot_product_attention (exact on CPU)"),
    "sdpa_cudnn": AttentionBackend(
        "sdpa_cudnn", _sdpa_cudnn, lambda: True, "torch SDPA with cuDNN attention explicitly first"
    ),
    "flash_attn": AttentionBackend(
        "flash_attn",
        _flash,
        lambda: torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None,
        "flash-attn 2/3 (optional extra; bf16/fp16 on CUDA only)",
    ),
    "flash_attn_4": AttentionBackend(
        "flash_attn_4",
        _flash4,
        _fa4_available,
        "FlashAttention-4 (flash-attn-4, the 'fa4' extra) where FA4_CROSSOVERS measured it faster, SDPA elsewhere",
    ),
    "flash_attn_4_force": AttentionBackend(
        "flash_attn_4_force",
        _flash4_force,
        _fa4_available,
        "FlashAttention-4 for every bf16/fp16 call it can run (for measuring FA4_CROSSOVERS)",
    ),
}


def attention_backends() -> list[str]:
    """The names a loader takes, "auto" (the default) first."""
    return [AUTO, *BACKENDS]


def resolve_auto() -> AttentionBackend:
    """What "auto" runs: FlashAttention-4 (its measured per-shape table, SDPA below the crossover) where the
    `fa4` extra imports on a GPU it has kernels for, else SDPA. The choice is logged once."""
    backend = BACKENDS["flash_attn_4"] if _fa4_available() else BACKENDS["sdpa"]
    if f"auto:{backend.name}" not in _NOTED:
        _NOTED.add(f"auto:{backend.name}")
        why = "flash-attn-4 imports on this GPU" if backend.name != "sdpa" else "flash-attn-4 is not installed here"
        log.info("attention 'auto': %s (%s)", backend.name, why)
    return backend


def get_attention_backend(name: str = AUTO, strict: bool = False) -> AttentionBackend:
    """Return the backend called `name` ("auto": `resolve_auto`); unknown names raise, unavailable ones fall back
    to SDPA (logged)."""
    if name == AUTO:
        return resolve_auto()
    if name not in BACKENDS:
        raise BackendUnavailableError(f"unknown attention backend '{name}'; expected one of {attention_backends()}")
    backend = BACKENDS[name]
    if not backend.is_available():
        if strict:
            raise BackendUnavailableError(f"attention backend '{name}' is not available on this machine")
        log.warning("attention backend '%s' is not available here; using sdpa instead", name)
        return BACKENDS["sdpa"]
    return backend
