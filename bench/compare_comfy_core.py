"""Ours vs ComfyUI core's AR video path (`CausalWanModel` driven as `sample_ar_video` drives it), one GPU, one run.

ComfyUI is not part of this repository and nothing of it is copied here: pass a checkout (v0.27 or later,
with comfy/ldm/wan/ar_model.py) or the trimmed copy `bench/pack_peer_refs.sh` makes (.ref/comfy) with
`--comfyui-dir`; core's modules are imported from there at run time. What runs of core is its own code:
`comfy.ldm.wan.ar_model.CausalWanModel` built with `comfy.ops.disable_weight_init` (the operations ComfyUI
picks when weights and compute share a dtype, model fully resident), `comfy.ldm.modules.attention`'s
`optimized_attention` as core selects it, RoPE through `comfy_kitchen` (core's dependency; its own backend
choice, recorded in the JSON), core's KV-cache dicts (`init_kv_caches`, `init_crossattn_caches`).

The sampling loop is core's own `sample_ar_video`, compiled at run time from the checkout's
comfy/k_diffusion/sampling.py (that one function; importing the module would pull in scipy, torchsde and the
model patcher) with a plain `range` for its progress bar: per block of `num_frame_per_block` latent frames, one
model call per sigma, x0 by the flow rule, re-noise with `torch.manual_seed(seed + block·1000 + i)` /
`randn_like`, the cache's `end` rolled back after every noisy step and before the clean context pass at sigma
0. It reaches the model through `model.inner_model.inner_model` (`CoreDenoiser`); each model call is what
`BaseModel._apply_model` does for Wan (comfy/model_base.py: CONST input, `timestep = 1000·sigma`, the input
and context cast to the model dtype, `x − out.float()·sigma`), without ComfyUI's sampler/guider layers around
it (a cfg-1 guider adds only Python work, so leaving it out favours core). `compile` compiles the whole
diffusion model as the TorchCompileModel node does (comfy_api/torch_helpers/torch_compile.py:
`torch.compile(diffusion_model, backend="inductor", options={"guard_filter_fn": skip_torch_compile_dict},
mode=None, fullgraph=False, dynamic=None)`, the guard filter read from the checkout's
comfy_extras/nodes_torch_compile.py). Ours: `inferix_core.clients.benchmark.build_engine` (the `inferix bench`
protocol) with our `compile` option (compile_blocks).

Both sides get the same random weights (ours built with the protocol's seed; core's `load_state_dict(strict=
True)` of our state dict: our parameter names are the canonical Wan names, which core's WanModel keeps), the
same prompt embedding, the same sigmas (our scheduler's warped [1000, 750, 500, 250], shift 5, then 0) and
the same noise (core's draws, handed to our pipeline as its noise source), so their outputs are comparable:
`--tiny --check` asserts they agree within 1e-4 in CPU float32 (2 blocks), which proves the harness drives
both on the same math. On the GPU the JSON records max |ours − core| (bf16) and max |compiled − eager| of
each side.

    PYTHONPATH=. python bench/compare_comfy_core.py --comfyui-dir /path/to/ComfyUI --json core.json
    PYTHONPATH=. python bench/compare_comfy_core.py --comfyui-dir /path/to/ComfyUI --tiny --check   # CPU

Import shims, only where a package is missing (the GPU image has none of ComfyUI's requirements beyond
torch, einops, psutil, numpy, safetensors): `comfy_aimdo` (dynamic-VRAM bindings, imported by comfy.ops and
model_management; nothing of it runs while dynamic VRAM is off, as here) and `psutil` (system memory, read
at import). `comfy_kitchen` is required (core's RoPE calls it): installed (its wheel carries the CUDA extension), else
`--kitchen-dir` with its Python files (bench/pack_peer_refs.sh copies them to .ref/ck; then its eager backend).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import logging
import sys
import types
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "fixtures"))
import refgen  # noqa: E402  (random weights for the tiny check, the module helper)
import sidebyside as sbs  # noqa: E402

log = logging.getLogger("compare_comfy_core")
CORE_KEYS = ("model_type", "patch_size", "text_len", "in_dim", "dim", "ffn_dim", "freq_dim", "text_dim",
             "out_dim", "num_heads", "num_layers", "qk_norm", "cross_attn_norm", "eps")  # fmt: skip


# -- core -------------------------------------------------------------------------------------------
def install_core_shims() -> list[str]:
    """Stub what core imports but this path never runs, where it is not installed; returns what was stubbed."""
    stubbed = []
    if importlib.util.find_spec("comfy_aimdo") is None:  # dynamic VRAM: off unless main.py turns it on
        refgen.module("comfy_aimdo", __path__=[])
        for name in ("host_buffer", "vram_buffer", "model_vbar", "torch", "control", "model_mmap"):
            refgen.module(f"comfy_aimdo.{name}")
        stubbed.append("comfy_aimdo")
    if importlib.util.find_spec("psutil") is None:  # model_management reads the system memory at import

        def virtual_memory():
            with open("/proc/meminfo") as f:
                pages = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)}
            return types.SimpleNamespace(total=pages["MemTotal"], available=pages["MemAvailable"])

        refgen.module("psutil", virtual_memory=virtual_memory)
        stubbed.append("psutil")
    return stubbed


def import_core(
    comfy_dir: Path, device: torch.device, kitchen_dir: Path | None = None, pytorch_attention: bool = False
) -> dict:
    """Core's modules from `comfy_dir`; on a CPU-only machine core is told `--cpu` (its own flag).

    `kitchen_dir`: a folder holding the `comfy_kitchen` package, searched after everything else, so an
    installed comfy_kitchen (with its CUDA extension) wins over a Python-only copy."""
    comfy_dir = comfy_dir.resolve()
    if not (comfy_dir / "comfy" / "ldm" / "wan" / "ar_model.py").is_file():
        raise SystemExit(f"{comfy_dir} has no comfy/ldm/wan/ar_model.py; pass a ComfyUI v0.27+ checkout")
    sys.path.insert(0, str(comfy_dir))
    if kitchen_dir is not None:
        sys.path.append(str(kitchen_dir.resolve()))
    stubbed = install_core_shims()
    if importlib.util.find_spec("comfy_kitchen") is None:
        raise SystemExit(
            "core's RoPE needs comfy_kitchen: pip install comfy-kitchen, or pass --kitchen-dir with a folder "
            "holding its package (bench/pack_peer_refs.sh copies its Python files to .ref/ck)"
        )
    from comfy.cli_args import args

    if device.type == "cpu":
        args.cpu = True
    if pytorch_attention:  # core's --use-pytorch-cross-attention (its default on CUDA; on CPU it picks sub-quad)
        args.use_pytorch_cross_attention = True
    with contextlib.redirect_stdout(io.StringIO()):
        import comfy.ldm.modules.attention as attention
        import comfy.ops
        import comfy.quant_ops
        from comfy.ldm.wan.ar_model import CausalWanModel
    ck = comfy.quant_ops.ck
    backends = {k: v["available"] and not v["disabled"] for k, v in ck.list_backends().items()}
    return {"CausalWanModel": CausalWanModel, "ops": comfy.ops.disable_weight_init, "stubbed": stubbed,
            "attention": attention.optimized_attention.__name__, "kitchen_backends": backends,
            "kitchen": str(Path(ck.__file__).parent), "dir": str(comfy_dir)}  # fmt: skip


def core_function(comfy_dir: Path, rel: str, name: str, scope: dict):
    """One top-level function of a core file, compiled from the checkout's source with `scope` as its globals
    (importing the whole module would pull in what the function does not use)."""
    path = comfy_dir / rel
    tree = ast.parse(path.read_text())
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        raise SystemExit(f"{path} has no function {name}; pass a ComfyUI v0.27+ checkout")
    exec(compile(ast.Module([fn], type_ignores=[]), str(path), "exec"), scope)
    return scope[name]


def skip_torch_compile_dict(comfy_dir: Path):
    """The TorchCompileModel node's guard filter (comfy_extras/nodes_torch_compile.py)."""
    return core_function(comfy_dir, "comfy_extras/nodes_torch_compile.py", "skip_torch_compile_dict", {})


def core_sampler(comfy_dir: Path):
    """Core's `sample_ar_video` (comfy/k_diffusion/sampling.py); its progress bar (`trange`) is a plain range."""
    scope = {"torch": torch, "trange": lambda n, disable=None: range(n)}
    return core_function(comfy_dir, "comfy/k_diffusion/sampling.py", "sample_ar_video", scope)


def build_core(core: dict, config, weights: dict, device: torch.device, dtype: torch.dtype):
    kwargs = {k: getattr(config, k) for k in CORE_KEYS}
    model = core["CausalWanModel"](**kwargs, device=device, dtype=dtype, operations=core["ops"])
    ours, theirs = set(weights), set(model.state_dict())
    if ours != theirs:
        raise RuntimeError(
            f"key sets differ: only ours {sorted(ours - theirs)[:5]}, only core's {sorted(theirs - ours)[:5]}"
        )
    model.load_state_dict(weights, strict=True)
    return model.eval().requires_grad_(False)


def core_apply_model(diffusion_model, model_dtype: torch.dtype, context: torch.Tensor):
    """`BaseModel._apply_model` for Wan (comfy/model_base.py) with CONST model sampling and multiplier 1000."""

    def apply(x: torch.Tensor, sigma: torch.Tensor, transformer_options: dict) -> torch.Tensor:
        xc = x.to(model_dtype)
        t = (sigma * 1000).float()
        ctx = context.to(xc.device, model_dtype)
        options = {**transformer_options, "prefetch_dynamic_vbars": False}
        out = diffusion_model(xc, t, context=ctx, control=None, transformer_options=options)
        return x - out.float() * sigma.reshape(-1, *([1] * (out.ndim - 1)))

    return apply


class CoreDenoiser:
    """What `sample_ar_video` is given as `model`: called as model(x, sigma, **extra_args), and reaching the
    diffusion model through `model.inner_model.inner_model` (ComfyUI: KSampler's wrapper → BaseModel)."""

    def __init__(self, diffusion_model, apply, model_dtype: torch.dtype):
        self.inner_model = types.SimpleNamespace(
            inner_model=types.SimpleNamespace(diffusion_model=diffusion_model, get_dtype=lambda: model_dtype)
        )
        self.apply = apply

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor, model_options: dict, seed: int) -> torch.Tensor:
        return self.apply(x, sigma, model_options["transformer_options"])


def run_core(sampler, causal_model, apply, x: torch.Tensor, sigmas: torch.Tensor, seed: int, n: int, dtype):
    """One `sample_ar_video` call over the whole latent x (B, C, F, H, W), as SamplerARVideo runs it."""
    extra = {"model_options": {"transformer_options": {}}, "seed": seed}
    with torch.no_grad():
        return sampler(CoreDenoiser(causal_model, apply, dtype), x, sigmas, extra_args=extra, disable=True,
                       num_frame_per_block=n)  # fmt: skip


# -- ours -------------------------------------------------------------------------------------------
class CoreNoise:
    """sample_ar_video's noise as our pipeline's noise source (layout (B, F, C, H, W)): the initial latent `x`
    (B, C, F, H, W), and for our re-noise before step s of block b its draw after step s − 1,
    `torch.manual_seed(seed + b·1000 + s − 1)` then a standard normal of the block's (B, C, n, H, W) shape."""

    def __init__(self, x: torch.Tensor, seed: int):
        self.x, self.seed = x, seed

    def initial(self, start_frame: int, shape) -> torch.Tensor:
        return self.x[:, :, start_frame : start_frame + shape[1]].permute(0, 2, 1, 3, 4)

    def step(self, block: int, step: int, shape) -> torch.Tensor:
        torch.manual_seed(self.seed + block * 1000 + step - 1)
        b, n, c, h, w = shape
        return torch.randn(b, c, n, h, w, device=self.x.device, dtype=torch.float32).permute(0, 2, 1, 3, 4)


def build_ours(args, variant: str):
    from inferix_core.clients.benchmark import BenchConfig, build_engine

    cfg = BenchConfig(preset="tiny" if args.tiny else "wan-1.3b", device=args.device, dtype=args.dtype,
                      compile=variant == "compile")  # fmt: skip
    pipe, context = build_engine(cfg)
    if args.tiny:  # fresh values everywhere (the init zeroes the head): a parity check that can fail
        refgen.randomize(pipe.model, 0)
        context = torch.randn(context.shape, generator=torch.Generator().manual_seed(1)).to(context)
    return pipe, context


def run_ours(pipe, context, x: torch.Tensor, seed: int, num_blocks: int) -> torch.Tensor:
    from inferix_core.pipeline import GenerationRequest

    h, w = x.shape[-2:]
    req = GenerationRequest(
        num_blocks, h, w, context, seed=seed, noise=CoreNoise(x, seed), final_context_pass=False
    )  # as generate_video (no kept world)
    with torch.no_grad():
        return pipe.generate(req).permute(0, 2, 1, 3, 4)  # (B, C, F, H, W) as core returns it


# -- the run ----------------------------------------------------------------------------------------
def latent_noise(args, r: int, device: torch.device) -> torch.Tensor:
    """ComfyUI's prepare_noise: a CPU generator seeded with the run's seed, float32, then to the device."""
    h, w = (8, 12) if args.tiny else (60, 104)
    shape = (1, 16, args.latent_frames, h, w)
    return torch.randn(shape, generator=torch.Generator().manual_seed(r), dtype=torch.float32).to(device)


def check(args, core: dict) -> int:
    """CPU float32: core's output latents for `--check-blocks` blocks against ours, within 1e-4."""
    device = torch.device("cpu")
    pipe, context = build_ours(args, "eager")
    weights = pipe.model.state_dict()
    model = build_core(core, pipe.model.config, weights, device, torch.float32)
    sigmas = torch.tensor([*pipe.sigmas, 0.0], dtype=torch.float32)
    n = pipe.sampling.block_frames
    args.latent_frames = args.check_blocks * n
    x = latent_noise(args, 7, device)
    apply = core_apply_model(model, torch.float32, context)
    theirs = run_core(core_sampler(args.comfyui_dir), model, apply, x, sigmas, 7, n, torch.float32)
    ours = run_ours(pipe, context, x, 7, args.check_blocks)
    diff = sbs.max_abs_diff(ours, theirs)
    scale = theirs.abs().max().item()
    block_diffs = [sbs.max_abs_diff(ours[:, :, b * n : (b + 1) * n], theirs[:, :, b * n : (b + 1) * n])
                   for b in range(args.check_blocks)]  # fmt: skip
    ok = diff < 1e-4 and torch.isfinite(ours).all().item() and scale > 1e-2
    print(f"parity (CPU fp32, core's sample_ar_video, {args.check_blocks} blocks of {n} frames, sigmas "
          f"{[round(float(s), 5) for s in sigmas]}): max |ours - core| = {diff:.3e} (per block "
          f"{', '.join(f'{d:.1e}' for d in block_diffs)}; max |core| = {scale:.3f}) -> {'OK' if ok else 'FAIL'}")  # fmt: skip
    sbs.write_json(args.json, {"check": {"max_abs_diff": diff, "per_block": block_diffs, "max_abs_core": scale,
                   "ok": ok, "sigmas": sigmas.tolist(),
                   "core": {k: v for k, v in core.items() if k not in ("CausalWanModel", "ops")}}})  # fmt: skip
    return 0 if ok else 1


def dynamo_stats() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {f"{group}.{k}": int(v) for group in ("stats", "recompiles") for k, v in counters[group].items()}


def context_effect(run, x: torch.Tensor, n: int) -> float:
    """How much block 1's output moves when only block 0's noise changes, relative to block 1's size.

    A causal model sees block 0 through its KV cache, so this is > 0; exactly 0 means block 1 never saw
    block 0: the cache was not read. `run` maps latents (B, C, 2n, H, W) to the sampled latents.
    """
    other = x.clone()
    other[:, :, :n] = torch.randn(x[:, :, :n].shape, generator=torch.Generator().manual_seed(99)).to(x)
    a, b = run(x)[:, :, n : 2 * n].float(), run(other)[:, :, n : 2 * n].float()
    return ((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item()


def profile_side(fn, path: Path, device: torch.device) -> None:
    """One more run under torch.profiler: the kernels by total device time (where the two sides differ)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn(0)
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=45, max_name_column_width=90))
    print(f"profile written to {path}", flush=True)


def run_variant(args, core: dict, variant: str, device, dtype, frames: int, rows: list, outputs: dict, save) -> None:
    """Both sides in one variant: ours built by the protocol, core from our state dict; core first, then ours."""
    pipe, context = build_ours(args, variant)
    sigmas = torch.tensor([*pipe.sigmas, 0.0], dtype=torch.float32, device=device)
    n = pipe.sampling.block_frames
    num_blocks = args.latent_frames // n
    model = build_core(core, pipe.model.config, pipe.model.state_dict(), device, dtype)
    diffusion = model
    if variant == "compile":  # TorchCompileModel: the whole diffusion model, inductor, its guard filter
        diffusion = torch.compile(model, backend="inductor", mode=None, fullgraph=False, dynamic=None,
                                  options={"guard_filter_fn": skip_torch_compile_dict(args.comfyui_dir)})  # fmt: skip
    apply = core_apply_model(diffusion, dtype, context)
    sampler = core_sampler(args.comfyui_dir)
    sides = {
        "core": lambda r: run_core(sampler, model, apply, latent_noise(args, r, device), sigmas, r, n, dtype),
        "ours": lambda r: run_ours(pipe, context, latent_noise(args, r, device), r, num_blocks),
    }
    two_blocks = {  # the context check: 2 blocks, seed 0
        "core": lambda x: run_core(sampler, model, apply, x, sigmas, 0, n, dtype),
        "ours": lambda x: run_ours(pipe, context, x, 0, 2),
    }
    for side, fn in sides.items():
        try:
            before = dynamo_stats()
            result, out = sbs.time_runs(fn, device, args.warmup, args.repeats, frames)
            if variant == "compile":  # graphs compiled and recompiles during this side's runs (a fallback shows)
                result["dynamo"] = {k: v - before.get(k, 0) for k, v in dynamo_stats().items()}
            try:  # its own try: a failing check must not lose the timed row
                x = latent_noise(args, 0, device)[:, :, : 2 * n]
                result["context_effect"] = context_effect(two_blocks[side], x, n)
                if result["context_effect"] == 0.0:
                    print(f"WARNING: {side} {variant} ignores its KV cache: block 1 does not see block 0", flush=True)
            except Exception as exc:
                result["context_effect_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append({"side": side, "variant": variant, **result})
            outputs[(side, variant)] = out
            if args.profile is not None:
                profile_side(fn, args.profile / f"{side}_{variant}.txt", device)
            print(f"{side} {variant}: {result['median_total_s']:.3f} s, {result['fps']:.2f} FPS", flush=True)
        except Exception as exc:  # one failing side must not lose the other rows; it is reported
            rows.append({"side": side, "variant": variant, "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
            print(f"{side} {variant} FAILED: {rows[-1]['error']}", flush=True)
        save()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--comfyui-dir", type=Path, required=True, help="a ComfyUI checkout (v0.27+) or .ref/comfy")
    p.add_argument(
        "--kitchen-dir", type=Path, help="a folder with the comfy_kitchen package (used if none is installed)"
    )
    p.add_argument("--variants", default="eager,compile", help="comma list of eager, compile (both sides each)")
    p.add_argument("--latent-frames", type=int, default=21, help="21 latent = 81 pixel frames (480x832)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="the tiny CPU model (8x12 latents) instead of 1.3B at 480x832")
    p.add_argument("--check", action="store_true", help="with --tiny: CPU fp32 parity of core and ours, then exit")
    p.add_argument("--check-blocks", type=int, default=2)
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--json", type=Path)
    p.add_argument("--core-pytorch-attention", action="store_true",
                   help="core's --use-pytorch-cross-attention (what it runs on CUDA) also on the CPU")  # fmt: skip
    p.add_argument("--profile", type=Path, help="a folder: one more run of each side under torch.profiler")
    args = p.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.check:
        if not args.tiny:
            raise SystemExit("--check runs at the tiny config: add --tiny")
        args.device, args.dtype = "cpu", "fp32"
        return check(
            args, import_core(args.comfyui_dir, torch.device("cpu"), args.kitchen_dir, args.core_pytorch_attention)
        )
    args.dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    if args.device == "cpu" and not args.tiny:
        raise SystemExit("the full-size comparison needs a CUDA GPU (or pass --tiny for a CPU smoke run)")
    device, dtype = torch.device(args.device), {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    core = import_core(args.comfyui_dir, device, args.kitchen_dir, args.core_pytorch_attention)
    frames = sbs.pixel_frames(args.latent_frames)
    rows: list[dict] = []
    outputs: dict[tuple[str, str], torch.Tensor] = {}
    meta = {**sbs.device_info(device), "frames": frames, "latent_frames": args.latent_frames,
            "geometry": "tiny 8x12 latents" if args.tiny else "480x832 (60x104 latents)", "dtype": args.dtype,
            "block_frames": 3, "core": {k: v for k, v in core.items() if k not in ("CausalWanModel", "ops")}}  # fmt: skip

    def output_diffs() -> dict[str, float | None]:
        diffs = {f"ours_vs_core_{v}": sbs.max_abs_diff(outputs.get(("ours", v)), outputs.get(("core", v)))
                 for v in ("eager", "compile")}  # fmt: skip
        for side in ("ours", "core"):
            diffs[f"{side}_compile_vs_eager"] = sbs.max_abs_diff(
                outputs.get((side, "compile")), outputs.get((side, "eager"))
            )
        return diffs

    def save():
        sbs.write_json(args.json, {**meta, "rows": rows, "max_abs_diff": output_diffs(),
                                   "speedup": sbs.speedups(rows, "core")})  # fmt: skip

    for variant in args.variants.split(","):
        if variant not in ("eager", "compile"):
            raise SystemExit(f"unknown variant '{variant}'; expected eager or compile")
        run_variant(args, core, variant, device, dtype, frames, rows, outputs, save)
        sbs.free_memory()
    sbs.print_table(f"{meta['gpu']}, torch {meta['torch']}, {frames} frames, {meta['geometry']}, {args.dtype}; "
                    f"core attention {core['attention']}, comfy_kitchen {core['kitchen_backends']}", rows, "core")  # fmt: skip
    save()
    diffs = output_diffs()
    core_diff, our_diff = diffs["core_compile_vs_eager"] or 0.0, diffs["ours_compile_vs_eager"] or 0.0
    if args.dtype == "fp32" and core_diff > 1e-3:  # fp32 compile should match eager to ~1e-6
        print(f"WARNING: core compiled differs from core eager by {core_diff:.3g} in fp32 (ours: {our_diff:.3g}): "
              "its compiled run is not the same computation", flush=True)  # fmt: skip
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
