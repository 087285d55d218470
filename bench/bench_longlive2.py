"""LongLive 2.0-5B shape at 704x1280: ours vs the authors' own bf16 inference pipeline, in one process.

Random weights (the 5B architecture: dim 3072, 30 layers, 48 latent channels), the released inference
settings (configs/inference.yaml: UniPC 4 steps at shift 5, 8-frame blocks, a 32-frame window with an
8-frame sink, no CFG), one prompt. Both sides run the same transformer weights (ours are loaded from
theirs). The reference is imported from `--reference-dir` (NVlabs/LongLive main) with the import shims of
bench/fixtures/gen_longlive2.py; its attention is its own (flash-attn when installed, else its SDPA).
Needs `diffusers` and `omegaconf` for the reference side only.

Measured per side (CUDA events, warm-up then median of the repeats):
* diffusion: the block loop to clean latents (theirs: `inference(..., return_latents=True)`);
* end to end: with the Wan 2.2 VAE (random weights) decoding to pixels. Theirs decodes the whole video at
  the end (`streaming_vae: false`, as inference.yaml ships), so its first frame is its total; ours
  stream-decodes each block as it is clean, so the first frame comes after block 0;
* peak GPU memory; then ours with regional `torch.compile` of the blocks (`--compile`, as `load_world_model(...,
  compile=True)`: `compile_blocks`; the first compiled run's time is recorded as `compile_cold_start_s`, the
  warm-up absorbs it) and with FP8 block linears (`--fp8`, on top of the compiled blocks when both are given).
FPS counts pixel frames: F latent frames → 1 + 4·(F − 1).

    PYTHONPATH=.:/tmp/refsite python bench/bench_longlive2.py --reference-dir /path/to/LongLive --fp8 --json ll2.json
    python bench/bench_longlive2.py --compile --warmup 1 --repeats 3 --json ll2_compile.json   # ours, eager then compiled
    python bench/bench_longlive2.py --smoke          # CPU, tiny sizes, ours only (tests/test_bench_longlive2.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.clients.benchmark import PRESETS
from inferix_core.models.registry import get_family
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SeededNoise
from inferix_core.vae import VAEDecodeOptions, Wan22VAE, Wan22VAEConfig

HERE = Path(__file__).resolve().parent


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_longlive2", HERE / "fixtures" / "gen_longlive2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Timer:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            return a.elapsed_time(b) / 1000
        return b - a


def _measure(fn, timer: _Timer, warmup: int, repeats: int) -> dict:
    """fn() → (end, first_frame_mark or None); returns medians of total and first-frame seconds and the peak."""
    runs = []
    for r in range(warmup + repeats):
        if timer.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = timer.now()
        end, first = fn()
        total = timer.seconds(start, end)
        first_s = timer.seconds(start, first) if first is not None else total
        peak = torch.cuda.max_memory_allocated() / 2**30 if timer.cuda else None
        if r >= warmup:
            runs.append({"total_s": total, "first_frame_s": first_s, "peak_gib": peak})
    return {
        "total_s": statistics.median(x["total_s"] for x in runs),
        "first_frame_s": statistics.median(x["first_frame_s"] for x in runs),
        "peak_gib": max(x["peak_gib"] for x in runs) if timer.cuda else None,
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference-dir", type=Path, help="checkout of NVlabs/LongLive (main); omit for ours only")
    ap.add_argument("--latent-frames", type=int, default=32, help="latent frames (32 → 125 pixel frames)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fp8", action="store_true", help="also run ours with FP8 block linears")
    ap.add_argument("--compile", action="store_true", help="also run ours with torch.compile'd blocks (compile_blocks)")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: its default)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny sizes (the protocol, not the numbers)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    fam = get_family("longlive2")
    if args.smoke:
        preset, device, dtype = PRESETS["tiny-5b"], torch.device("cpu"), torch.float32
        block, window, sink, frames = preset["block_frames"], 4, 2, preset["latent_frames"]
        vae_cfg = Wan22VAEConfig(dim=2, dec_dim=4)
    else:
        preset, device, dtype = PRESETS["wan-5b"], torch.device("cuda"), torch.bfloat16
        block, window, sink, frames = (
            fam.sampling.block_frames,
            fam.cache.window_frames,
            fam.cache.sink_frames,
            args.latent_frames,
        )
        vae_cfg = Wan22VAEConfig()
    mc, h, w = preset["config"], preset["latent_height"], preset["latent_width"]
    cuda = device.type == "cuda"
    timer = _Timer(cuda)
    num_blocks = frames // block
    pixel_frames = 1 + 4 * (frames - 1)
    sampling = dataclasses.replace(fam.sampling, block_frames=block)
    cache = KVCacheConfig(window_frames=window, sink_frames=sink)
    result: dict = {
        "settings": {
            "latent": [frames, mc.in_dim, h, w], "pixels": [pixel_frames, h * 16, w * 16], "block_frames": block,
            "window": window, "sink": sink, "steps": list(sampling.denoising_steps), "solver": sampling.solver,
            "dtype": str(dtype), "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "compile": args.compile, "compile_mode": args.compile_mode, "fp8": args.fp8,
            "warmup": args.warmup, "repeats": args.repeats,
        },
    }  # fmt: skip

    ref_state = None
    if args.reference_dir is not None:
        gen = _gen_module()
        model_cfg = {k: (tuple(v) if k == "patch_size" else v) for k, v in mc.to_dict().items() if k in gen.TINY}
        pipeline_mod, _ = gen.install(args.reference_dir, model=model_cfg, fp32_attention=args.smoke)
        import utils.wan_5b_wrapper as wrapper  # theirs, from --reference-dir
        from wan_5b.modules.vae2_2 import WanVAE_

        wrapper._video_vae = lambda pretrained_path=None, **kw: WanVAE_(  # random weights, their architecture
            dim=vae_cfg.dim, dec_dim=vae_cfg.dec_dim, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
            attn_scales=[], temperal_downsample=[False, True, True], dropout=0.0,
        )  # fmt: skip
        case = dict(
            latent_frames=frames, latent_h=h, latent_w=w, block_frames=block, local_attn_size=window, sink_size=sink,
            steps=len(sampling.denoising_steps), shift=sampling.shift, multi_shot_sink=True, rope_offset=8.0,
            i2v=False, prompts=["a red fox runs through snow"],
        )  # fmt: skip
        vae = wrapper.WanVAEWrapper()
        pipe, generator, text = gen.build_pipeline(
            pipeline_mod, case, seed=0, model=model_cfg, device=device, vae=vae, randomise_weights=args.smoke
        )
        text.table = {p: e.to(device, dtype) for p, e in text.table.items()}
        pipe = pipe.to(device=device, dtype=dtype).requires_grad_(False)  # as their inference.py
        ref_state = {k: v for k, v in generator.model.state_dict().items()}
        noise = torch.randn(1, frames, mc.in_dim, h, w, generator=torch.Generator().manual_seed(1)).to(device, dtype)
        prompts = [case["prompts"][0]] * num_blocks

        def theirs(decode: bool):
            def fn():
                with torch.no_grad():
                    pipe.inference(noise, [prompts], return_latents=not decode)
                return timer.now(), None

            return fn

        result["reference_diffusion"] = _measure(theirs(False), timer, args.warmup, args.repeats)
        result["reference_end_to_end"] = _measure(theirs(True), timer, args.warmup, args.repeats)
        del pipe, generator
        if cuda:
            torch.cuda.empty_cache()

    torch.manual_seed(0)
    with torch.device(device):
        model = CausalWanTransformer(mc).to(dtype).eval().requires_grad_(False)
    if ref_state is not None:  # the same weights as the reference
        model.load_state_dict({k: v.to(device, dtype) for k, v in ref_state.items()})
    with torch.device(device):
        our_vae = Wan22VAE(vae_cfg).to(dtype).eval().requires_grad_(False)
    if cuda:
        our_vae.decode_options = VAEDecodeOptions.fast()
    context = torch.randn(1, mc.text_len, mc.text_dim, generator=torch.Generator().manual_seed(2)).to(device, dtype)

    def ours(decode: bool, pipe: BlockDiffusionPipeline):
        def fn():
            req = GenerationRequest(num_blocks, h, w, context, noise=SeededNoise(0, device="cpu"))
            decoder = our_vae.stream_decoder() if decode else None
            first = None
            for out in pipe.stream(req):
                if decoder is not None:
                    decoder.decode(out.latents.permute(0, 2, 1, 3, 4))
                if first is None:
                    first = timer.now()
            return timer.now(), first

        return fn

    pipe = BlockDiffusionPipeline(model, sampling, cache)
    result["ours_diffusion"] = _measure(ours(False, pipe), timer, args.warmup, args.repeats)
    result["ours_end_to_end"] = _measure(ours(True, pipe), timer, args.warmup, args.repeats)
    tag = ""
    if args.compile:
        from inferix_core.models.wan.causal_transformer import compile_blocks

        compile_blocks(model, mode=args.compile_mode)
        tag = "_compiled"
        start = time.perf_counter()
        ours(False, pipe)()  # the first call compiles (one block graph shared by every block)
        if cuda:
            torch.cuda.synchronize()
        result["settings"]["compile_cold_start_s"] = time.perf_counter() - start
        result["ours_compiled_diffusion"] = _measure(ours(False, pipe), timer, args.warmup, args.repeats)
        result["ours_compiled_end_to_end"] = _measure(ours(True, pipe), timer, args.warmup, args.repeats)
    if args.fp8:
        from inferix_core.models.fp8 import quantize_linears_fp8

        quantize_linears_fp8(model)
        result[f"ours_fp8{tag}_diffusion"] = _measure(ours(False, pipe), timer, args.warmup, args.repeats)
        result[f"ours_fp8{tag}_end_to_end"] = _measure(ours(True, pipe), timer, args.warmup, args.repeats)

    print(f"LongLive 2.0-5B shape, {pixel_frames} frames at {w * 16}x{h * 16}, {result['settings']['device']}")
    if "compile_cold_start_s" in result["settings"]:
        print(f"torch.compile cold start (first compiled run): {result['settings']['compile_cold_start_s']:.1f} s")
    print(f"{'run':<28}{'total s':>10}{'FPS':>9}{'first frame s':>15}{'peak GiB':>10}")
    for name, r in result.items():
        if name == "settings":
            continue
        r["fps"] = pixel_frames / r["total_s"]
        peak = f"{r['peak_gib']:.2f}" if r["peak_gib"] is not None else "-"
        print(f"{name:<28}{r['total_s']:>10.3f}{r['fps']:>9.2f}{r['first_frame_s']:>15.3f}{peak:>10}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
