"""The memory-bound steps of one Wan block, each compiled alone, against the bytes it must move.

Issue #19's transformer profile puts 0.285 s of an 81-frame run in elementwise and norm kernels, about 44 % of
the copy roof for the bytes they must move. This times each of those steps at the block's real shape (one
3-frame chunk of Wan 1.3B at 480×832: 4,680 tokens, d = 1,536, 12 heads, ffn 8,960, bf16), compiled as the
block compiles it, and a few formulations of the same math, so a lever is measured before it is built:

* q/k RMS norm + RoPE: as the block does it on CUDA (one Triton kernel, `inferix_core.kernels.qk_norm_rope`),
  as Inductor fuses the modules (`SelfAttention.qk_norm` + `apply_rope`, the flip formula), with the stack
  formula, and with q and k stacked into one norm;
* the adaLN LayerNorm + modulation, alone and after the residual add, as the block runs them on CUDA (one Triton
  kernel, `inferix_core.kernels.layer_norm_modulate`, at 1, 2 and 4 rows a program) and as Inductor fuses the
  modules; the gated residual (`addcmul`);
* the FFN with the bias + tanh GELU in cuBLASLt's GEMM epilogue (`FeedForward`, as built) against the GELU
  as its own pass, and the whole block (no cache) both ways;
* each under Inductor's defaults, with `coordinate_descent_tuning` (its block-size search), with
  `triton.multi_kernel` (persistent reductions over the 1,536 features, benchmarked against the looped ones),
  and with `persistent_rows` (`bench/inductor_choices.py`: those reductions persistent, always).

Each row: median device µs per call (CUDA events over replays of a CUDA graph of 20 calls, after warm-up), the
least bytes the step must read and write, GB/s and the share of the device copy rate measured here. Every variant's output is checked against
the as-built step (max |diff|, bf16 level).

    PYTHONPATH=. python bench/bench_block_elementwise.py --json elementwise.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.inductor_choices import persistent_row_reductions
from bench.kernel_efficiency import _time
from inferix_core.clients.benchmark import PRESETS
from inferix_core.kernels import layer_norm_modulate as lnm
from inferix_core.kernels.qk_norm_rope import qk_norm_rope
from inferix_core.models.wan.causal_transformer import AttentionBlock, SelfAttention
from inferix_core.models.wan.layers import RotaryEmbedding3D, apply_rope, rotate_pairs_stack

ROWS_AS_BUILT = lnm.ROWS_PER_PROGRAM

# Inductor options per pass: its defaults; its block-size search; multi-kernel, which also builds the
# reductions over d = 1,536 as persistent kernels (one read of each row; the default keeps them looped above
# 1,024) and keeps whichever of the two runs faster on the first call
PASSES = {
    "default": {},
    "coordinate_descent": {"coordinate_descent_tuning": True},
    "multi_kernel": {"triton.multi_kernel": 1},
    # inner reductions up to 2,048 features persistent (`PersistentRowReductions`); no graph cache, whose key
    # does not see the choices handler and would hand back the default pass's kernels
    "persistent_rows": {"fx_graph_cache": False},
}
# passes that also set Inductor's choices handler around their compiling call
HANDLERS = {"persistent_rows": persistent_row_reductions}


def rope_stack(x: torch.Tensor, freqs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """apply_rope's compiled branch with the stack formula, so both formulas compile in one process."""
    b, seq, heads, dim = x.shape
    return rotate_pairs_stack(x.float().view(b, seq, heads, dim // 2, 2), freqs).flatten(3).to(dtype)


def time_in_graph(fn: Callable[[], object], inner: int = 20, repeats: int = 5) -> float:
    """Median device seconds of one fn() call: `inner` calls captured in one CUDA graph, replayed `repeats` times.

    As the model runs them (whole calls are CUDA graphs there): a compiled step called from Python costs tens
    of µs of guard checks and launches, more than these kernels take, so host-timed calls measure the host.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return sorted(times)[len(times) // 2]


def copy_rate(numel: int = 1 << 28) -> float:
    """Device copy bytes/s (read + write) of a 512 MiB bf16 buffer."""
    src = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return 2 * src.numel() * src.element_size() / _time(lambda: dst.copy_(src), repeats=5, inner=10)


def steps(block: AttentionBlock, tokens: int, frames: int, heads: int, head_dim: int) -> dict[str, tuple]:
    """name → (fn, args, least bytes, reference name) at the block's shape."""
    d = heads * head_dim
    dev, bf = "cuda", torch.bfloat16
    attn = block.self_attn
    hw = tokens // frames
    qr = torch.randn(1, tokens, d, device=dev, dtype=bf)
    kr = torch.randn(1, tokens, d, device=dev, dtype=bf)
    rope = RotaryEmbedding3D(head_dim)
    freqs = rope.freqs(torch.arange(frames), 30, hw // 30, torch.device(dev))
    x = torch.randn(1, tokens, d, device=dev, dtype=bf)
    e0 = torch.randn(1, frames, 6, d, device=dev, dtype=bf)
    y = torch.randn(1, tokens, d, device=dev, dtype=bf)
    el = 2  # bf16 bytes

    def qk_as_built(q, k, f):
        def one(norm, t):
            return apply_rope(SelfAttention.qk_norm(norm, t).view(1, tokens, heads, head_dim), f, bf)

        return one(attn.norm_q, q), one(attn.norm_k, k)

    def qk_fused(q, k, f):  # as the block runs it on CUDA: one Triton kernel (inferix_core.kernels)
        fq, fk = qk_norm_rope(q, k, attn.norm_q.weight, attn.norm_k.weight, f, attn.norm_q.eps)
        return fq.view(1, tokens, heads, head_dim), fk.view(1, tokens, heads, head_dim)

    def qk_stack(q, k, f):
        def one(norm, t):
            return rope_stack(SelfAttention.qk_norm(norm, t).view(1, tokens, heads, head_dim), f, bf)

        return one(attn.norm_q, q), one(attn.norm_k, k)

    def qk_stacked(q, k, f):
        both = torch.stack((q, k))  # (2, 1, L, d): one reduction kernel for q and k
        normed = F.rms_norm(both, (d,), eps=attn.norm_q.eps)
        w = torch.stack((attn.norm_q.weight, attn.norm_k.weight)).view(2, 1, 1, d)
        out = apply_rope((normed * w).float().view(2, tokens, heads, head_dim), f, bf)
        return out[0:1], out[1:2]

    def modulate(x_, e0_):
        mod = block.modulation.unsqueeze(1) + e0_
        e = mod.chunk(6, dim=2)
        scale = 1 + mod[:, :, 1:2]
        return torch.addcmul(e[0], block.norm1(x_).unflatten(1, (frames, -1)), scale).flatten(1, 2)

    def modulation_rows(e0_):  # shift and scale as the block takes them: strided per-frame views
        mod = block.modulation.unsqueeze(1) + e0_
        return mod[:, :, 0:1], (1 + mod[:, :, 1::3]).chunk(2, dim=2)[0]

    def modulate_fused(rows_per_program):
        def run(x_, e0_):  # as the block runs it on CUDA: one Triton kernel (inferix_core.kernels)
            lnm.ROWS_PER_PROGRAM = rows_per_program
            try:
                return lnm.layer_norm_modulate(x_, *modulation_rows(e0_), block.norm1.eps)
            finally:
                lnm.ROWS_PER_PROGRAM = ROWS_AS_BUILT

        run.eager = True  # one kernel: nothing for Inductor to fuse, and the row count is read per call
        return run

    def add_modulate(x_, y_, e0_):  # x + cross-attention, then norm2 + modulation, as the modules
        shift, scale = modulation_rows(e0_)
        x_ = x_ + y_
        return x_, torch.addcmul(shift, block.norm2(x_).unflatten(1, (frames, -1)), scale).flatten(1, 2)

    def add_modulate_fused(x_, y_, e0_):
        return lnm.add_layer_norm_modulate(x_, y_, *modulation_rows(e0_), block.norm2.eps)

    add_modulate_fused.eager = True

    def residual(x_, y_, e0_):
        gate = (block.modulation.unsqueeze(1) + e0_)[:, :, 2:3]
        return torch.addcmul(x_.unflatten(1, (frames, -1)), y_.unflatten(1, (frames, -1)), gate).flatten(1, 2)

    def ffn_epilogue(x_):  # FeedForward as built: on CUDA bf16 the bias + GELU in the GEMM's epilogue
        return block.ffn(x_)

    def ffn_two_pass(x_):  # the same three modules run as written: GEMM, GELU pass, GEMM
        return nn.Sequential.forward(block.ffn, x_)

    ctx = torch.randn(1, 512, d, device=dev, dtype=bf)
    ctx_k, ctx_v = block.cross_attn.context_kv(ctx)

    # the whole block is compiled as compile_blocks compiles it (main), so these two run eagerly around it
    def whole_block(x_, e0_, f):
        return block(x_, e0_, f, ctx_k, ctx_v, frames)

    def whole_block_two_pass(x_, e0_, f):
        block.ffn.gelu_epilogue = False
        try:
            return block(x_, e0_, f, ctx_k, ctx_v, frames)
        finally:
            block.ffn.gelu_epilogue = True

    whole_block.compiles_inside = whole_block_two_pass.compiles_inside = True

    return {
        "qk norm + RoPE, Inductor (flip)": (qk_as_built, (qr, kr, freqs), 4 * tokens * d * el, None),
        "qk norm + RoPE, fused kernel (as built)": (
            qk_fused,
            (qr, kr, freqs),
            4 * tokens * d * el,
            "qk norm + RoPE, Inductor (flip)",
        ),
        "qk norm + RoPE, stack formula": (
            qk_stack,
            (qr, kr, freqs),
            4 * tokens * d * el,
            "qk norm + RoPE, Inductor (flip)",
        ),
        "qk norm + RoPE, q and k stacked": (
            qk_stacked,
            (qr, kr, freqs),
            4 * tokens * d * el,
            "qk norm + RoPE, Inductor (flip)",
        ),
        "adaLN LayerNorm + modulation, Inductor": (modulate, (x, e0), 2 * tokens * d * el, None),
        "adaLN LayerNorm + modulation, fused kernel (as built)": (
            modulate_fused(ROWS_AS_BUILT),
            (x, e0),
            2 * tokens * d * el,
            "adaLN LayerNorm + modulation, Inductor",
        ),
        **{
            f"adaLN LayerNorm + modulation, fused kernel, {n} rows a program": (
                modulate_fused(n),
                (x, e0),
                2 * tokens * d * el,
                "adaLN LayerNorm + modulation, Inductor",
            )
            for n in (2, 4)
            if n != ROWS_AS_BUILT
        },
        "residual + LayerNorm + modulation, Inductor": (add_modulate, (x, y, e0), 4 * tokens * d * el, None),
        "residual + LayerNorm + modulation, fused kernel (as built)": (
            add_modulate_fused,
            (x, y, e0),
            4 * tokens * d * el,
            "residual + LayerNorm + modulation, Inductor",
        ),
        "gated residual": (residual, (x, y, e0), 3 * tokens * d * el, None),
        # GEMMs and attention inside: timed, not set against a copy roof
        "FFN, GELU pass (two-pass)": (ffn_two_pass, (x,), None, None),
        "FFN, GELU in the GEMM epilogue (as built)": (ffn_epilogue, (x,), None, "FFN, GELU pass (two-pass)"),
        "whole block, no cache, two-pass FFN": (whole_block_two_pass, (x, e0, freqs), None, None),
        "whole block, no cache (as built)": (whole_block, (x, e0, freqs), None, "whole block, no cache, two-pass FFN"),
    }


def max_diff(a, b) -> float:
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    return max((u.float() - v.float()).abs().max().item() for u, v in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=3, help="latent frames per chunk (the block size)")
    p.add_argument("--passes", default="default,coordinate_descent", help=f"comma list of {', '.join(PASSES)}")
    p.add_argument("--only", default="", help="run only the rows whose name contains this")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    preset = PRESETS["wan-1.3b"]
    cfg = preset["config"]
    tokens = args.frames * (preset["latent_height"] // 2) * (preset["latent_width"] // 2)
    torch.manual_seed(0)
    block = AttentionBlock(cfg).to("cuda", torch.bfloat16).eval()
    roof = copy_rate()
    print(f"device copy rate {roof / 1e9:.0f} GB/s; {tokens} tokens, d {cfg.dim}, ffn {cfg.ffn_dim}")
    rows = []
    table = steps(block, tokens, args.frames, cfg.num_heads, cfg.head_dim)
    outputs: dict[str, object] = {}
    for pass_name in args.passes.split(","):
        options = PASSES[pass_name]
        for name, (fn, fargs, nbytes, ref) in table.items():
            if args.only not in name:
                continue
            torch._dynamo.reset()
            if getattr(fn, "eager", False):
                compiled = fn
            elif getattr(fn, "compiles_inside", False):
                block.compile(dynamic=False, options=options)
                compiled: Callable = fn
            else:
                compiled = torch.compile(fn, dynamic=False, options=options)
            with torch.no_grad(), HANDLERS[pass_name]() if pass_name in HANDLERS else nullcontext():
                out = compiled(*fargs)
                seconds = time_in_graph(lambda c=compiled, a=fargs: c(*a))
            key = name if pass_name == "default" else f"{name} [{pass_name}]"
            if name in outputs:  # a later pass: against the first pass's output of the same step
                diff = max_diff(out, outputs[name])
            else:
                diff = max_diff(out, outputs[ref]) if ref is not None and ref in outputs else None
                outputs[name] = out
            row = dict(step=key, us=round(seconds * 1e6, 2), max_abs_diff=diff)
            if nbytes is not None:
                row.update(least_mb=round(nbytes / 1e6, 1), gb_s=round(nbytes / seconds / 1e9))
                row["of_copy_rate"] = round(nbytes / seconds / roof, 3)
            rows.append(row)
            rate = (
                f"{row['least_mb']:7.1f} MB {row['gb_s']:6d} GB/s {100 * row['of_copy_rate']:5.1f} %" if nbytes else ""
            )
            print(f"{key:58s} {row['us']:9.2f} us {rate:32s} diff {diff}", flush=True)
            if args.json:  # after every row, so a run cut short keeps what it measured
                args.json.write_text(json.dumps(dict(copy_gb_s=roof / 1e9, tokens=tokens, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
