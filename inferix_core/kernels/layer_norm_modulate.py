"""Wan's adaLN step, LayerNorm then the per-frame modulation `shift + norm(x) · scale`, in one Triton kernel,
with the residual add before it where the block has one (`x + cross_attn(...)`, then norm2).

Why a kernel of our own: Inductor fuses these steps but keeps the LayerNorm's 1,536-wide reduction looped (it
does so above 1,024 features), reading each row twice: alone, at Wan 1.3B's shape, its kernel ran at 29 % of the
H200's copy rate and this one at 38 %; the persistent form Inductor can be told to use was slower in the run
(docs/performance.md, "Wave 2, sixth pass" and "eighth pass"). Here each program normalises whole rows held in
registers, reading each input once. The rows must be contiguous: the transformer keeps its residual stream
token-major for this (`CausalWanTransformer.row_major_stream`).

The arithmetic is the eager modules' (`LayerNorm` without affine, then `torch.addcmul`): the residual sum
rounded to the stream's dtype, mean and variance in float32, the normalised row rounded to that dtype, then
`shift + n · scale` in float32 rounded once. `fused_layer_norm_modulate_supported` says when it applies.
"""

from __future__ import annotations

import torch

from .lazy_ops import LazyOps, triton

_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
_MAX_WIDTH = 16384
# the configuration timed in the whole run on the H200; 2 and 4 rows were 7 % faster alone (from L2,
# bench/bench_block_elementwise.py) and are not yet timed in a run
ROWS_PER_PROGRAM = 1

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _layer_norm_modulate_kernel(
        x_ptr, res_ptr, shift_ptr, scale_ptr, x_out_ptr, h_ptr,
        n_rows, seq_len, frame_tokens, shift_sb, shift_sf, scale_sb, scale_sf, eps,
        WIDTH: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    ):  # fmt: skip
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        mask = (rows < n_rows)[:, None] & (cols < WIDTH)[None, :]
        offsets = rows.to(tl.int64)[:, None] * WIDTH + cols[None, :]
        dtype = x_ptr.dtype.element_ty
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:  # the residual stream's sum, rounded as `x + y` rounds it, and written back
            summed = (x + tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)).to(dtype)
            tl.store(x_out_ptr + offsets, summed, mask=mask)
            x = summed.to(tl.float32)
        mean = tl.sum(x, axis=1) / WIDTH
        centred = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(centred * centred, axis=1) / WIDTH + eps)
        normed = (centred * rstd[:, None]).to(dtype).to(tl.float32)  # F.layer_norm's output, rounded
        frame = (rows % seq_len) // frame_tokens
        batch = rows // seq_len
        shift_rows = (batch.to(tl.int64) * shift_sb + frame * shift_sf)[:, None]
        scale_rows = (batch.to(tl.int64) * scale_sb + frame * scale_sf)[:, None]
        shift = tl.load(shift_ptr + shift_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale = tl.load(scale_ptr + scale_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(h_ptr + offsets, (shift + normed * scale).to(h_ptr.dtype.element_ty), mask=mask)

    def _launch(x, residual, shift, scale, x_out, h, eps):
        b, seq, width = x.shape
        frames = shift.shape[1]
        block = triton.next_power_of_2(width)
        rows = b * seq
        grid = (triton.cdiv(rows, ROWS_PER_PROGRAM),)
        torch.library.wrap_triton(_layer_norm_modulate_kernel)[grid](
            x, x if residual is None else residual, shift, scale, h if x_out is None else x_out, h,
            rows, seq, seq // frames, shift.stride(0), shift.stride(1), scale.stride(0), scale.stride(1), eps,
            WIDTH=width, BLOCK=block, ROWS=ROWS_PER_PROGRAM, HAS_RESIDUAL=residual is not None,
            num_warps=4 if block * ROWS_PER_PROGRAM <= 1024 else 8,
        )  # fmt: skip

    def _define_ops():
        @torch.library.triton_op("inferix::layer_norm_modulate", mutates_args=())
        def plain(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
            h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            _launch(x, None, shift, scale, None, h, eps)
            return h

        @torch.library.triton_op("inferix::add_layer_norm_modulate", mutates_args=())
        def with_residual(
            x: torch.Tensor, residual: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
            x_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            _launch(x, residual, shift, scale, x_out, h, eps)
            return x_out, h

        return plain, with_residual


OPS = LazyOps("the fused LayerNorm + modulation kernels", _define_ops if triton is not None else None)


def layer_norm_modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """x (B, L, D) → shift + LayerNorm(x) · scale, shift/scale (B, F, 1, D) per frame of L/F tokens; (B, L, D)."""
    return OPS.get()[0](x, shift, scale, eps)


def add_layer_norm_modulate(
    x: torch.Tensor, residual: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + residual, shift + LayerNorm(x + residual) · scale), as `layer_norm_modulate`."""
    return OPS.get()[1](x, residual, shift, scale, eps)


def fused_layer_norm_modulate_supported(
    x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, residual: torch.Tensor | None = None
) -> bool:
    """Whether the kernel computes what `LayerNorm` (no affine) + `torch.addcmul` compute for these operands:
    CUDA inference, bf16/fp16 throughout, contiguous (B, L, D) rows, per-frame (B, F, 1, D) modulation rows
    with F dividing L."""
    if not x.is_cuda or torch.is_grad_enabled() or not OPS.usable():
        return False
    return operands_fit(x, shift, scale, residual)


def operands_fit(
    x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, residual: torch.Tensor | None = None
) -> bool:
    """The dtype and layout rules of `fused_layer_norm_modulate_supported`, on any device."""
    if x.dtype not in _SUPPORTED_DTYPES or not (shift.dtype == scale.dtype == x.dtype):
        return False
    if x.ndim != 3 or not x.is_contiguous() or x.shape[-1] > _MAX_WIDTH:
        return False
    if residual is not None and (
        residual.shape != x.shape or residual.dtype != x.dtype or not residual.is_contiguous()
    ):
        return False
    b, seq, width = x.shape
    for t in (shift, scale):
        if t.ndim != 4 or t.shape[0] != b or t.shape[2] != 1 or t.shape[3] != width or t.stride(3) != 1:
            return False
    frames = shift.shape[1]
    return scale.shape[1] == frames and frames > 0 and seq % frames == 0


__all__ = [
    "OPS",
    "add_layer_norm_modulate",
    "fused_layer_norm_modulate_supported",
    "layer_norm_modulate",
    "operands_fit",
]
