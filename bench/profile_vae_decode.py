"""Where the Wan VAE's streamed decode spends its GPU time, and each conv shape against its measured peak (issue #19).

End to end the decode is the largest cost after the transformer (~0.86 s of 2.7 s at 480×832), and #19 allows
`blocked` only with every kernel group at >= 85 % of its measured peak on this GPU. This script:

- decodes 81 frames block by block exactly as `load_world_model` sets the VAE up on CUDA (its decode options,
  compiled with `--compile`, and its stream slicing), timed with CUDA events after a warm-up, then once under
  `torch.profiler`, kernels grouped (conv / attention / fused Triton / copies and the rest);
- records every convolution the decode makes (shape, stride, padding, layout) from an eager pass of the same
  options (`ConvRecorder`, a dispatch mode: the sub-pixel upsample calls `F.conv2d` outside any module);
- per distinct shape, measures on this GPU the cuDNN rate of that very conv (cudnn.benchmark, its layout), the
  rate of a plain GEMM of the same implicit-GEMM sizes (M = output pixels, K = C_in·kernel volume,
  N = C_out: the tensor-core roof of that matrix product), and, for the 3×3×3 convs, the same conv as a 2-D
  conv over the three time taps stacked into channels (`stacked_time_taps_conv`, checked against conv3d).

    PYTHONPATH=. python bench/profile_vae_decode.py [--compile] [--height 480 --width 832] --json vae.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from inferix_core.vae import WanVAE, WanVAEConfig

sys.path.insert(0, str(Path(__file__).parent))
from kernel_efficiency import _time

GROUPS = (
    ("attention", re.compile(r"fmha|flash|attention|softmax", re.I)),
    ("conv", re.compile(r"conv|xmma|implicit|fprop|cudnn|cutlass|sm90|gemm|nvjet", re.I)),
    ("fused (triton)", re.compile(r"^triton", re.I)),
    ("layout / copy", re.compile(r"copy|nchw|nhwc|transpose|cat|CatArray", re.I)),
)


def group_of(name: str) -> str:
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return "other elementwise"


@dataclass(frozen=True)
class ConvShape:
    """One convolution as the decode calls it; `channels_last` is the input's layout (NDHWC / NHWC)."""

    input: tuple[int, ...]
    weight: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    groups: int
    channels_last: bool

    @property
    def output(self) -> tuple[int, ...]:
        spatial = [
            (n + 2 * p - k) // s + 1
            for n, p, k, s in zip(self.input[2:], self.padding, self.weight[2:], self.stride, strict=True)
        ]
        return (self.input[0], self.weight[0], *spatial)

    @property
    def gemm(self) -> tuple[int, int, int]:
        """Implicit-GEMM sizes (M, K, N): output pixels, C_in/groups · kernel volume, C_out."""
        m = 1
        for n in (self.output[0], *self.output[2:]):
            m *= n
        k = self.weight[1]
        for n in self.weight[2:]:
            k *= n
        return m, k, self.weight[0]

    @property
    def flops(self) -> float:
        m, k, n = self.gemm
        return 2.0 * m * k * n

    def label(self) -> str:
        kernel = "x".join(map(str, self.weight[2:]))
        size = "x".join(map(str, self.input[2:]))
        return f"{len(self.weight) - 2}d k{kernel} {self.weight[1]}→{self.weight[0]} @ {size}"


class ConvRecorder(TorchDispatchMode):
    """Every aten convolution run under it, as `ConvShape`s in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[ConvShape] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default:
            x, w, _bias, stride, padding, _dil, _transposed, _out_pad, groups = args
            fmt = torch.channels_last_3d if x.ndim == 5 else torch.channels_last
            cl = x.is_contiguous(memory_format=fmt) and not x.is_contiguous()
            self.calls.append(
                ConvShape(tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding), int(groups), bool(cl))
            )
        return func(*args, **kwargs)


def stack_time_taps(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, C, T, H, W) with each output frame's kt input frames stacked into channels (B·t_out, kt·C, H, W),
    and the (kt, kh, kw) kernel's time taps folded the same way (C_out, kt·C_in, kh, kw); both NHWC."""
    B, C, T, H, W = x.shape
    cout, cin, kt, kh, kw = weight.shape
    frames = x.unfold(2, kt, 1)  # (B, C, t_out, H, W, kt)
    stacked = frames.permute(0, 2, 5, 1, 3, 4).reshape(B * (T - kt + 1), kt * C, H, W)
    w2 = weight.permute(0, 2, 1, 3, 4).reshape(cout, kt * cin, kh, kw)
    return stacked.contiguous(memory_format=torch.channels_last), w2.contiguous(memory_format=torch.channels_last)


def stacked_time_taps_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding) -> torch.Tensor:
    """conv3d(x, weight) for a (kt, kh, kw) kernel with stride 1 and no time padding, as one conv2d over
    `stack_time_taps`."""
    B, t_out = x.shape[0], x.shape[2] - weight.shape[2] + 1
    stacked, w2 = stack_time_taps(x, weight)
    y = F.conv2d(stacked, w2, bias, padding=padding[1:])
    return y.reshape(B, t_out, weight.shape[0], *y.shape[2:]).permute(0, 2, 1, 3, 4)


def measure_shape(shape: ConvShape, dtype: torch.dtype, max_gemm_rows: int = 1 << 20) -> dict:
    """cuDNN's time for this conv, a same-size GEMM's, and (3×3×3) the stacked-taps conv2d's (with its copy)."""
    dev = "cuda"
    fmt = (torch.channels_last_3d if len(shape.input) == 5 else torch.channels_last) if shape.channels_last else None
    x = torch.randn(shape.input, device=dev, dtype=dtype)
    w = torch.randn(shape.weight, device=dev, dtype=dtype) / (shape.gemm[1] ** 0.5)
    if fmt is not None:
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    conv = F.conv3d if len(shape.input) == 5 else F.conv2d
    with torch.backends.cudnn.flags(enabled=True, benchmark=True):
        t_conv = _time(lambda: conv(x, w, None, shape.stride, shape.padding, 1, shape.groups))
        m, k, n = shape.gemm
        rows = min(m, max_gemm_rows)
        a = torch.randn(rows, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        t_gemm = _time(lambda: a @ b) * m / rows
        out = {"conv_s": t_conv, "gemm_s": t_gemm}
        is_3x3x3 = len(shape.weight) == 5 and shape.weight[2] > 1 and shape.weight[3] > 1
        if is_3x3x3 and all(s == 1 for s in shape.stride) and shape.padding[0] == 0:
            ref = conv(x, w, None, shape.stride, shape.padding)
            alt = stacked_time_taps_conv(x, w, None, shape.padding)
            out["stacked_max_rel_err"] = float((alt.float() - ref.float()).abs().max() / ref.float().abs().max())
            out["stacked_s"] = _time(lambda: stacked_time_taps_conv(x, w, None, shape.padding))
            xs, w2 = stack_time_taps(x, w)
            out["stacked_conv_only_s"] = _time(lambda: F.conv2d(xs, w2, None, padding=shape.padding[1:]))
    return out


def fused_pass_bytes(vae: WanVAE, blocks: list[torch.Tensor]) -> dict[str, tuple[int, int]]:
    """(calls, bytes) of each compiled pass of a decode of `blocks`, every operand read or written once.

    The least memory traffic those kernels can have: `norm_silu_cat` reads x and the cached history and
    writes both into the conv's buffer; `add_bias_residual_` reads h and the shortcut and writes h. Runs the
    passes eagerly (on the meta device for full sizes: no memory, no GPU).
    """
    from inferix_core.vae import layers

    tally: dict[str, list[int]] = {}

    def count(name, fn, *args):
        if name == "norm_silu_cat":
            x, _gamma, past = args[:3]
            elems = 2 * (x.numel() + past.numel())
        else:
            h, _bias, residual = args
            elems = 2 * h.numel() + residual.numel()
        entry = tally.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += elems * args[0].element_size()
        return fn(*args)

    real, layers._run_compiled = layers._run_compiled, count
    try:
        with torch.no_grad():
            decode_video(vae, blocks)
    finally:
        layers._run_compiled = real
    return {k: (c, b) for k, (c, b) in tally.items()}


def build_vae(dtype: torch.dtype, compile: bool) -> WanVAE:
    """The Wan 2.1 VAE (random weights) set up as `load_world_model` sets it up on CUDA."""
    from inferix_core.models.registry import loader_vae_decode_options, loader_vae_stream_slicing

    torch.manual_seed(0)
    vae = WanVAE(WanVAEConfig()).to("cuda", dtype).eval()
    vae.decode_options = loader_vae_decode_options("cuda", compile=compile)
    vae.stream_slicing = loader_vae_stream_slicing(vae, "cuda")
    return vae


def decode_video(vae: WanVAE, blocks: list[torch.Tensor]) -> None:
    decoder = vae.stream_decoder()
    for z in blocks:
        decoder.decode(z)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--blocks", type=int, default=7, help="latent blocks (7 × 3 latent frames = 81 frames)")
    p.add_argument("--block-frames", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="the compiled fused step (the default with --compile)")
    p.add_argument("--whole-blocks", action="store_true", help="decode whole blocks per call, not the loader's slicing")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--no-shapes", action="store_true", help="skip the per-shape measurements")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    dtype = torch.bfloat16
    vae = build_vae(dtype, args.compile)
    if args.whole_blocks:
        from inferix_core.vae.memory import DecodeSlicing

        vae.stream_slicing = DecodeSlicing()
    s = vae.config.spatial_compression
    gen = torch.Generator(device="cuda").manual_seed(0)
    blocks = [
        torch.randn(1, vae.config.z_dim, args.block_frames, args.height // s, args.width // s, device="cuda",
                    dtype=dtype, generator=gen)
        for _ in range(args.blocks)
    ]  # fmt: skip
    with torch.no_grad():
        decode_video(vae, blocks)  # warm-up (and compile)
        walls = []
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            decode_video(vae, blocks)
            end.record()
            torch.cuda.synchronize()
            walls.append(start.elapsed_time(end) / 1e3)
        wall = sorted(walls)[len(walls) // 2]
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            decode_video(vae, blocks)
            torch.cuda.synchronize()
        recorder = ConvRecorder()
        eager_opts = vae.decode_options
        from dataclasses import replace

        vae.decode_options = replace(eager_opts, compile=False) if eager_opts is not None else None
        with recorder:
            decode_video(vae, blocks)
        vae.decode_options = eager_opts
    kernels: Counter[str] = Counter()
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if t and evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels[evt.key] += t / 1e6
    groups: Counter[str] = Counter()
    for name, t in kernels.items():
        groups[group_of(name)] += t
    kernel_s = sum(groups.values())
    print(f"Wan VAE streamed decode, {args.blocks} blocks of {args.block_frames} latent frames, {args.height}x"
          f"{args.width}, bf16, options {vae.decode_options}, slicing {vae.stream_slicing}")  # fmt: skip
    print(f"wall {wall:.4f} s (median of {walls}), kernels {kernel_s:.4f} s, GPU idle {wall - kernel_s:.4f} s")
    for g, t in groups.most_common():
        print(f"  {g:<20} {t:8.4f} s  {100 * t / kernel_s:5.1f} %")
    print("top kernels:")
    for name, t in kernels.most_common(args.top):
        print(f"  {t:8.4f} s  {name[:140]}")
    with torch.device("meta"):
        meta_vae = WanVAE(vae.config).to(dtype)
    meta_vae.decode_options, meta_vae.stream_slicing = vae.decode_options, vae.stream_slicing
    fused = fused_pass_bytes(meta_vae, [b.to("meta") for b in blocks]) if vae.decode_options.compile else {}
    fused_gb = sum(b for _, b in fused.values()) / 1e9
    if fused:
        t = groups.get("fused (triton)", 0.0)
        print(f"compiled passes: {sum(c for c, _ in fused.values())} calls, at least {fused_gb:.1f} GB read and "
              f"written → {fused_gb / max(t, 1e-9):.0f} GB/s over their {t:.4f} s")  # fmt: skip
    counts = Counter(recorder.calls)
    conv_flops = sum(c.flops * n for c, n in counts.items())
    result: dict = {
        "height": args.height, "width": args.width, "blocks": args.blocks, "block_frames": args.block_frames,
        "options": str(vae.decode_options), "slicing": str(vae.stream_slicing), "wall_s": wall, "walls_s": walls,
        "kernel_s": kernel_s, "groups_s": dict(groups), "top_kernels_s": dict(kernels.most_common(args.top)),
        "conv_calls": len(recorder.calls), "conv_flops": conv_flops, "fused_pass_bytes": fused,
    }  # fmt: skip
    print(f"{len(recorder.calls)} conv calls, {len(counts)} distinct shapes, {conv_flops / 1e12:.2f} TFLOP; "
          f"conv kernels {groups.get('conv', 0):.4f} s → {conv_flops / max(groups.get('conv', 1e-9), 1e-9) / 1e12:.0f}"
          " TFLOP/s")  # fmt: skip
    if not args.no_shapes:
        rows = []
        for shape, n in sorted(counts.items(), key=lambda kv: -kv[0].flops * kv[1]):
            r = measure_shape(shape, dtype)
            torch.cuda.empty_cache()
            rows.append({"shape": asdict(shape), "label": shape.label(), "calls": n, "flops": shape.flops, **r})
        total = {k: sum(r[k] * r["calls"] for r in rows if k in r) for k in ("conv_s", "gemm_s")}
        stacked = [r for r in rows if "stacked_s" in r]
        total["stacked_3x3x3_s"] = sum(r["stacked_s"] * r["calls"] for r in stacked)
        total["conv_3x3x3_s"] = sum(r["conv_s"] * r["calls"] for r in stacked)
        total["stacked_conv_only_3x3x3_s"] = sum(r["stacked_conv_only_s"] * r["calls"] for r in stacked)
        print(f"{'conv':<42} {'calls':>5} {'GFLOP':>7} {'cuDNN ms':>9} {'TF/s':>5} {'GEMM ms':>8} {'TF/s':>5} "
              f"{'stack ms':>8} {'(conv)':>7}")  # fmt: skip
        for r in rows:
            st = f"{1e3 * r['stacked_s']:8.3f} {1e3 * r['stacked_conv_only_s']:7.3f}" if "stacked_s" in r else ""
            print(f"{r['label']:<42} {r['calls']:5d} {r['flops'] / 1e9:7.1f} {1e3 * r['conv_s']:9.3f} "
                  f"{r['flops'] / r['conv_s'] / 1e12:5.0f} {1e3 * r['gemm_s']:8.3f} "
                  f"{r['flops'] / r['gemm_s'] / 1e12:5.0f} {st}")  # fmt: skip
        conv_run = groups.get("conv", 0.0)
        print(f"isolated cuDNN, all calls: {total['conv_s']:.4f} s (the run's conv kernels {conv_run:.4f} s: "
              f"{100 * total['conv_s'] / max(conv_run, 1e-9):.0f} % of peak); same-size GEMMs {total['gemm_s']:.4f}"
              f" s ({100 * total['gemm_s'] / max(conv_run, 1e-9):.0f} %); 3x3x3 convs {total['conv_3x3x3_s']:.4f} s"
              f" vs stacked taps {total['stacked_3x3x3_s']:.4f} s (conv2d only "
              f"{total['stacked_conv_only_3x3x3_s']:.4f} s)")  # fmt: skip
        result["shapes"] = rows
        result["isolated_totals_s"] = total
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
