"""The Wan self-attention's q/k RMSNorm and RoPE in one Triton kernel, for CUDA inference.

Why a kernel of our own: Wan normalises q and k over the full width (all heads), then rotates each head's
(x₂ᵢ, x₂ᵢ₊₁) pairs by the token's RoPE angles. Inductor fuses the two but keeps the 1,536-wide reduction
looped and cannot swap neighbouring elements in registers, so its kernel reads each row twice and runs at
about 31 % of the H200's copy rate (docs/performance.md, "Wave 2, fifth pass"). No kernel library we use
does this pair (vLLM's and FlashInfer's fused norm + RoPE normalise per head). Here one program holds one
token's q and k rows, reads each once, splits the pairs in registers and writes both rotated rows.

The arithmetic is the eager path's, rounding for rounding (`RMSNorm(out_dtype=float32)` then `apply_rope`):
normalise in float32, round to the input dtype, multiply by the weight and round again, rotate in float32,
round once to the output dtype. `qk_norm_rope` calls a `torch.library.triton_op`, so `torch.compile` keeps it
as one kernel inside its graphs (and CUDA graphs capture it); that op is defined on first use or by `register_kernels`,
not at import (`lazy_ops`). `fused_qk_norm_rope_supported` says when it applies, and callers run the unfused modules otherwise.
"""

from __future__ import annotations

import torch

from .lazy_ops import LazyOps, triton, triton_available

_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
_MAX_WIDTH = 16384  # one token's row is held in registers


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _norm_rope_row(src, w_ptr, dst, row, stride, even, pair_mask, cos, sin, eps, WIDTH: tl.constexpr):
        """One token's row: RMSNorm over WIDTH, rounded as Wan rounds it, then its pairs rotated."""
        base = src + row.to(tl.int64) * stride
        xe = tl.load(base + even, mask=pair_mask, other=0.0).to(tl.float32)
        xo = tl.load(base + even + 1, mask=pair_mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt((tl.sum(xe * xe, axis=0) + tl.sum(xo * xo, axis=0)) / WIDTH + eps)
        we = tl.load(w_ptr + even, mask=pair_mask, other=0.0).to(tl.float32)
        wo = tl.load(w_ptr + even + 1, mask=pair_mask, other=0.0).to(tl.float32)
        in_dtype = src.dtype.element_ty
        # normalised, rounded to the input dtype, times the weight, rounded again (Wan's RMSNorm order)
        ne = ((xe * rstd).to(in_dtype).to(tl.float32) * we).to(in_dtype).to(tl.float32)
        no = ((xo * rstd).to(in_dtype).to(tl.float32) * wo).to(in_dtype).to(tl.float32)
        out = dst + row.to(tl.int64) * WIDTH
        out_dtype = dst.dtype.element_ty
        tl.store(out + even, (ne * cos - no * sin).to(out_dtype), mask=pair_mask)
        tl.store(out + even + 1, (no * cos + ne * sin).to(out_dtype), mask=pair_mask)

    @triton.jit
    def _qk_norm_rope_kernel(
        q_ptr, k_ptr, wq_ptr, wk_ptr, freqs_ptr, q_out_ptr, k_out_ptr,
        seq_len, q_row_stride, k_row_stride, eps,
        WIDTH: tl.constexpr, PAIRS_PER_HEAD: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)  # one token of one batch item: rows are (b, l) in order
        token = row % seq_len
        half = tl.arange(0, BLOCK // 2)  # pair index across all heads
        pair_mask = half < WIDTH // 2
        even = 2 * half
        freq_off = token.to(tl.int64) * (PAIRS_PER_HEAD * 2) + (half % PAIRS_PER_HEAD) * 2
        cos = tl.load(freqs_ptr + freq_off, mask=pair_mask, other=0.0)
        sin = tl.load(freqs_ptr + freq_off + 1, mask=pair_mask, other=0.0)
        _norm_rope_row(q_ptr, wq_ptr, q_out_ptr, row, q_row_stride, even, pair_mask, cos, sin, eps, WIDTH)
        _norm_rope_row(k_ptr, wk_ptr, k_out_ptr, row, k_row_stride, even, pair_mask, cos, sin, eps, WIDTH)

    def _define_op():
        @torch.library.triton_op("inferix::qk_norm_rope", mutates_args=())
        def op(
            q: torch.Tensor,
            k: torch.Tensor,
            weight_q: torch.Tensor,
            weight_k: torch.Tensor,
            freqs: torch.Tensor,
            eps: float,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            b, seq, width = q.shape
            pairs = freqs.shape[-2]
            q_out = torch.empty((b, seq, width), dtype=q.dtype, device=q.device)
            k_out = torch.empty((b, seq, width), dtype=k.dtype, device=k.device)
            block = triton.next_power_of_2(width)
            torch.library.wrap_triton(_qk_norm_rope_kernel)[(b * seq,)](
                q, k, weight_q, weight_k, freqs, q_out, k_out,
                seq, q.stride(1), k.stride(1), eps,
                WIDTH=width, PAIRS_PER_HEAD=pairs, BLOCK=block, num_warps=4 if block <= 1024 else 8,
            )  # fmt: skip
            return q_out, k_out

        return op


OPS = LazyOps("the fused q/k norm + RoPE kernel", _define_op if triton is not None else None)


def qk_norm_rope(
    q: torch.Tensor, k: torch.Tensor, weight_q: torch.Tensor, weight_k: torch.Tensor, freqs: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, D) q and k → RMSNorm over D, then RoPE by freqs (L, 1, D/H/2, 2) float32 (cos, sin); (B, L, D)."""
    return OPS.get()(q, k, weight_q, weight_k, freqs, eps)


def fused_qk_norm_rope_supported(q: torch.Tensor, k: torch.Tensor, weight_q, weight_k, freqs: torch.Tensor) -> bool:
    """Whether `qk_norm_rope` computes exactly what the unfused modules would for these operands.

    CUDA inference only (no autograd through a Triton kernel), bf16/fp16 activations with weights of the
    same dtype, rows contiguous in their last dimension, and one float32 (cos, sin) table row per token.
    """
    if not (q.is_cuda and k.is_cuda) or torch.is_grad_enabled() or not OPS.usable():
        return False
    return operands_fit(q, k, weight_q, weight_k, freqs)


def operands_fit(q: torch.Tensor, k: torch.Tensor, weight_q, weight_k, freqs: torch.Tensor) -> bool:
    """The dtype and layout rules of `fused_qk_norm_rope_supported`, on any device."""
    if q.dtype not in _SUPPORTED_DTYPES or not (k.dtype == weight_q.dtype == weight_k.dtype == q.dtype):
        return False
    if q.ndim != 3 or q.shape != k.shape or q.stride(2) != 1 or k.stride(2) != 1 or q.shape[-1] > _MAX_WIDTH:
        return False
    if q.stride(0) != q.shape[1] * q.stride(1) or k.stride(0) != k.shape[1] * k.stride(1):
        return False  # rows are addressed as (b·L + l)·stride
    width = q.shape[-1]
    return (
        freqs.dtype == torch.float32
        and freqs.is_contiguous()
        and freqs.ndim == 4
        and freqs.shape[0] == q.shape[1]
        and freqs.shape[1] == 1
        and freqs.shape[3] == 2
        and width % (2 * freqs.shape[2]) == 0
    )


__all__ = ["OPS", "fused_qk_norm_rope_supported", "operands_fit", "qk_norm_rope", "triton_available"]
