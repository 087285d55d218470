"""Count the kernels and bytes of one eager transformer call on the meta device: no GPU, nothing computed.

Why: the H200 profile of issue #19 put 0.9 s of our 3.04 s eager run in `aten::copy_` (dtype casts) and
separate mul/add kernels. Each eager ATen op is (about) one kernel reading its inputs and writing its
outputs, so the op list of one call, with its bytes, says what an elementwise change saves before a GPU
sees it. The 1.3B-shape model is built on `meta` in bf16 as the bench builds it; one block-step call
(a 3-frame block, 4,680 tokens at 480×832) runs against a global KV cache already holding
`--start-frame` frames, under a `TorchDispatchMode` that records per ATen op the calls and the bytes of
its tensor inputs and outputs (broadcast dimensions counted once: the bytes a kernel touches). View ops
(`view`, `transpose`, `chunk`, ...) move nothing and are listed apart. Kernels counted here are ATen ops;
on CUDA `addmm` is one cuBLAS call and SDPA one attention kernel, as here.

    PYTHONPATH=. python bench/count_eager_bytes.py [--preset wan-1.3b] [--start-frame 9] [--json counts.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from inferix_core.cache import KVCacheConfig, KVCacheSpec, create_kv_cache
from inferix_core.clients.benchmark import DTYPES, PRESETS
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig

MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "_scaled_mm", "_convolution"}
COPY_OPS = {"copy_", "_to_copy", "clone", "cat", "stack", "index_copy_", "index_put_", "index_copy", "contiguous"}
NO_KERNEL = {"empty", "empty_strided", "empty_like", "promote_types", "result_type"}
MEMORY_KINDS = ("elementwise", "copy", "norm")  # memory-bound kernels: what the eager fusion of issue #19 cuts


def op_kind(name: str) -> str:
    """matmul / attention / copy / norm / elementwise for an ATen op name (overload dropped)."""
    if name in MATMUL_OPS:
        return "matmul"
    if "attention" in name or name.startswith("_scaled_dot_product"):
        return "attention"
    if name in COPY_OPS:
        return "copy"
    if "norm" in name or name in {"mean", "sum", "var_mean", "amax"}:
        return "norm"  # reductions (layer_norm, the RMSNorm mean): one kernel each
    return "elementwise"


def touched_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel reads or writes for `t`: its elements, a broadcast (stride 0) dimension counted once."""
    n = math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1
    return n * t.element_size()


class OpBytes(TorchDispatchMode):
    """Per ATen op: calls and bytes read + written (`rows()`); views are counted with zero bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[tuple[str, str], int] = defaultdict(int)  # (scope, op) -> calls
        self.bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.views: dict[str, int] = defaultdict(int)
        self.scope = "model"  # "block" inside a transformer block (set by hooks), else "model"
        self.inside_fused = 0  # > 0 while an op counted as one kernel (SDPA) runs its decomposition
        self.trace: list | None = None  # (op, bytes, [(shape, dtype)]) per kernel when a list

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.inside_fused:
            return out
        name = func.overloadpacket.__name__
        if func.is_view or name in {"view", "_unsafe_view", "alias", "detach", "lift_fresh"}:
            self.views[name] += 1
            return out
        if name in NO_KERNEL or not any(isinstance(t, torch.Tensor) for t in tree_leaves(out)):
            return out  # allocations and dtype queries: no kernel, no bytes
        read = {k: v for k, v in (kwargs or {}).items() if k != "out"}  # out= is written, counted as the output
        inputs = [t for t in tree_leaves((args, read)) if isinstance(t, torch.Tensor)]
        if name in {"index_copy_", "index_put_", "index_copy", "index_put"}:  # the written rows, not the buffer
            source = inputs[-1]
            self.record(name, [source, source, *inputs[1:-1]])
        elif name == "copy_":  # reads the source, writes the destination
            self.record(name, inputs[:2])
        else:  # an in-place op reads and writes self: listed as an input and as the output
            self.record(name, [*inputs, *(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))])
        return out

    def record(self, name: str, tensors: list[torch.Tensor]) -> None:
        self.calls[self.scope, name] += 1
        nbytes = sum(touched_bytes(t) for t in tensors)
        self.bytes[self.scope, name] += nbytes
        if self.trace is not None:
            self.trace.append((name, nbytes, [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in tensors]))

    def rows(self, scope: str | None = None) -> list[dict]:
        """Per op over every scope (or one): {op, kind, calls, bytes}, most bytes first."""
        calls: dict[str, int] = defaultdict(int)
        nbytes: dict[str, int] = defaultdict(int)
        for (sc, name), c in self.calls.items():
            if scope is None or sc == scope:
                calls[name] += c
                nbytes[name] += self.bytes[sc, name]
        rows = [dict(op=k, kind=op_kind(k), calls=c, bytes=nbytes[k]) for k, c in calls.items()]
        return sorted(rows, key=lambda r: -r["bytes"])


class FusedKernels(TorchFunctionMode):
    """SDPA and `F.rms_norm` counted as the one fused kernel each is on CUDA (inputs read, output written).

    On `meta` (and the CPU) both decompose before dispatch: SDPA into its math path (bmm, softmax, fp32
    casts), `rms_norm` into cast, pow, mean, add, rsqrt, mul, cast; CUDA runs one flash/cuDNN kernel and
    one `_fused_rms_norm` kernel. `ops` skips the ops of those decompositions.
    """

    FUSED = {
        torch.nn.functional.scaled_dot_product_attention: "scaled_dot_product_attention",
        torch.nn.functional.rms_norm: "rms_norm",
    }

    def __init__(self, ops: OpBytes) -> None:
        super().__init__()
        self.ops = ops

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = self.FUSED.get(func)
        if name is None:
            return func(*args, **kwargs)
        self.ops.inside_fused += 1
        try:
            out = func(*args, **kwargs)
            q = args[0] if args else kwargs.get("query", kwargs.get("input"))
            if name != "rms_norm" and out.device.type == "meta" and out.shape == q.shape:
                out = torch.empty_like(q)  # CUDA's fused kernels return the query's layout (math: contiguous)
        finally:
            self.ops.inside_fused -= 1
        tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        self.ops.record(name, tensors)
        return out


def count_block_step(
    config: WanConfig,
    latent_h: int,
    latent_w: int,
    block_frames: int = 3,
    start_frame: int = 9,
    dtype: torch.dtype = torch.bfloat16,
    device: str = "meta",
    model: CausalWanTransformer | None = None,
    trace: bool = False,
) -> dict:
    """The ops of one transformer call over frames [start_frame, start_frame + block_frames) against a
    global KV cache holding the frames before it (their entries are not computed: on meta they need not be).

    Returns {"rows": per-op rows {op, kind, calls, bytes}, "totals": per kind, "memory_bound": kernels and
    bytes of the elementwise/copy/norm ops, "memory_bound_per_block": the same inside one transformer block
    (embeddings and head left out), "block_rows": the rows inside the blocks, "views": view-op calls}.
    """
    if model is None:
        with torch.device(device):
            model = CausalWanTransformer(config).to(dtype).eval().requires_grad_(False)
    spec = KVCacheSpec(
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        head_dim=config.head_dim,
        frame_tokens=config.frame_tokens(latent_h, latent_w),
        block_frames=block_frames,
        batch_size=1,
        dtype=dtype,
        device=torch.device(device),
        max_frames=start_frame + block_frames,
    )
    cache = create_kv_cache(KVCacheConfig(), spec)
    for start in range(0, start_frame, block_frames):  # the past blocks' slots (values left as allocated)
        cache.begin(start, min(block_frames, start_frame - start))
    context = model.prepare_context(torch.randn(1, config.text_len, config.text_dim, device=device, dtype=dtype))
    x = torch.randn(1, config.in_dim, block_frames, latent_h, latent_w, device=device, dtype=dtype)
    timestep = torch.full((1, block_frames), 750.0, device=device)
    cache.begin(start_frame, block_frames)
    freqs = model.chunk_freqs(model.patch_grid(x.shape), start_frame, device=x.device)  # host-side table, cached
    ops = OpBytes()
    ops.trace = [] if trace else None

    def enter(*_):
        ops.scope = "block"

    def leave(*_):
        ops.scope = "model"

    hooks = [
        h for blk in model.blocks for h in (blk.register_forward_pre_hook(enter), blk.register_forward_hook(leave))
    ]
    try:
        with torch.no_grad(), ops, FusedKernels(ops):
            model(x, timestep, context, cache, start_frame, rope_freqs=freqs)
    finally:
        for h in hooks:
            h.remove()
    return {
        "tokens": block_frames * config.frame_tokens(latent_h, latent_w),
        "attended_tokens": (start_frame + block_frames) * config.frame_tokens(latent_h, latent_w),
        "num_layers": config.num_layers,
        "dtype": str(dtype).removeprefix("torch."),
        "rows": ops.rows(),
        "totals": kind_totals(ops.rows()),
        "memory_bound": memory_bound(ops.rows()),
        "memory_bound_per_block": {k: v / config.num_layers for k, v in memory_bound(ops.rows("block")).items()},
        "block_rows": ops.rows("block"),
        "views": dict(ops.views),
        **({"trace": ops.trace} if trace else {}),
    }


def kind_totals(rows: list[dict]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for r in rows:
        t = totals.setdefault(r["kind"], {"calls": 0, "bytes": 0})
        t["calls"] += r["calls"]
        t["bytes"] += r["bytes"]
    return totals


def memory_bound(rows: list[dict]) -> dict[str, int]:
    """Kernels and bytes of the elementwise, copy and norm ops (everything but matmuls and attention)."""
    picked = [r for r in rows if r["kind"] in MEMORY_KINDS]
    return {"kernels": sum(r["calls"] for r in picked), "bytes": sum(r["bytes"] for r in picked)}


def format_counts(result: dict) -> str:
    gb = 1e9
    lines = [
        f"one call: {result['tokens']} tokens against {result['attended_tokens']} attended, {result['dtype']}, "
        f"{result['num_layers']} blocks",
        f"{'op':<32} {'kind':<12} {'calls':>7} {'GB':>9}",
    ]
    lines += [f"{r['op']:<32} {r['kind']:<12} {r['calls']:>7} {r['bytes'] / gb:>9.3f}" for r in result["rows"]]
    lines.append("")
    for kind, t in sorted(result["totals"].items(), key=lambda kv: -kv[1]["bytes"]):
        lines.append(f"{'total ' + kind:<45} {t['calls']:>7} {t['bytes'] / gb:>9.3f}")
    m, p = result["memory_bound"], result["memory_bound_per_block"]
    lines.append(f"elementwise + copy + norm: {m['kernels']} kernels, {m['bytes'] / gb:.3f} GB per call")
    lines.append(f"  per transformer block: {p['kernels']:.1f} kernels, {p['bytes'] / gb:.4f} GB")
    lines.append(f"view ops (no kernel): {sum(result['views'].values())}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="wan-1.3b", choices=sorted(PRESETS))
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--block-frames", type=int, default=3)
    p.add_argument("--start-frame", type=int, default=9, help="frames already cached (9: the 4th of 7 blocks)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    preset = PRESETS[args.preset]
    result = count_block_step(
        preset["config"],
        preset["latent_height"],
        preset["latent_width"],
        args.block_frames,
        args.start_frame,
        DTYPES[args.dtype],
    )
    result["preset"] = args.preset
    print(format_counts(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
