"""Ours vs LongLive-1.3B's own pipeline (NVlabs/LongLive v1.0), window 12 + sink 3 + LoRA merged, one GPU, one run.

LongLive is not part of this repository and nothing of it is copied here: pass a checkout of NVlabs/LongLive
at v1.0 (or the trimmed copy `bench/pack_peer_refs.sh` makes, .ref/ll1) with `--reference-dir`; its modules
are imported from there, its packages that the project does not use (omegaconf, peft) come from PYTHONPATH.
What runs of theirs is what their inference.py runs: `configs/longlive_inference.yaml` (OmegaConf; local_attn_size
12, sink_size 3, 4 steps warped with shift 5, 3-frame blocks, context pass at t = 0), `WanDiffusionWrapper` with
its `CausalWanModel`, their LoRA path (`utils.lora_utils.configure_lora_for_model`, rank 256 = alpha, then
`peft.set_peft_model_state_dict` from a file saved as their trainer saves it), `pipeline.to(bfloat16)`, bf16
noise, `CausalInferencePipeline.inference`. Substitutions that change no timed work: random weights (ours,
built by the `inferix bench` protocol, loaded into theirs with `load_state_dict(strict=True)`) and a random
LoRA, a fixed prompt embedding instead of umT5, no VAE decode (diffusion alone). "LoRA merged" (the issue's
setting, and their fastest): after loading, peft's `merge_and_unload()` folds the adapters into the weights;
`--their-lora peft` keeps their shipped unmerged adapters instead (each linear runs its LoRA branch).
Without flash-attn their cross-attention (which asserts flash-attn) is routed to their own `attention()`,
whose fallback is SDPA, as in bench/compare_reference.py.

Ours: `build_engine` with the same window and sink (KVCacheConfig(12, 3)), the LoRA file merged by
`merge_loras_into_transformer` (what `load_world_model(lora=...)` does), eager and compiled (`--variants`).
Their side has no compile option (v1.0's inference path compiles nothing): every row of ours is compared with
their eager run. The warm-up run of theirs records its re-noise draws and ours replays them in its warm-up, so
the JSON has max |ours − theirs| on the same noise (bf16 on the GPU).

    PYTHONPATH=.:/tmp/refsite python bench/compare_longlive.py --reference-dir /path/to/LongLive --json ll.json
    PYTHONPATH=.:/tmp/refsite python bench/compare_longlive.py --reference-dir /path/to/LongLive --tiny --check

`--tiny --check` (CPU float32, tiny model, window 6 + sink 3 so that the window rolls, rank-4 LoRA merged on
both sides): their output latents against ours within 1e-4, with float32 SDPA for their attention (their
fallback casts to bf16), as the LongLive fixtures are made (bench/fixtures/gen_longlive.py, whose shims
this reuses).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.machinery
import importlib.util
import io
import sys
import tempfile
import types
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "fixtures"))
import gen_longlive as gl  # noqa: E402  (their import shims, fp32 SDPA, tiny cache constructors)
import refgen  # noqa: E402
import sidebyside as sbs  # noqa: E402

WAN_KEYS = ("model_type", "patch_size", "text_len", "in_dim", "dim", "ffn_dim", "freq_dim", "text_dim", "out_dim",
            "num_heads", "num_layers", "qk_norm", "cross_attn_norm", "eps")  # fmt: skip


class TapNoise(refgen.NoiseTap):
    """Their re-noise draws (`randn_like` inside inference), recorded in order, replayed as our noise source."""

    def __init__(self, noise: torch.Tensor):
        super().__init__()
        self.noise, self.next = noise, 0

    def initial(self, start_frame: int, shape) -> torch.Tensor:
        return self.noise[:, start_frame : start_frame + shape[1]].float()

    def step(self, block: int, step: int, shape) -> torch.Tensor:
        draw = self.draws[self.next]
        self.next += 1
        return draw.unflatten(0, (shape[0], shape[1])).float()


class _Config(types.SimpleNamespace):
    """The stubbed diffusers config (constructor arguments) with the dict views peft reads (`to_dict`, `get`)."""

    def get(self, key, default=None):
        return getattr(self, key, default)

    def to_dict(self) -> dict:
        return dict(vars(self))


# -- theirs -----------------------------------------------------------------------------------------
def build_theirs(args, wan_config, weights: dict, prompt: torch.Tensor, device: torch.device, lora_file: Path):
    ref = args.reference_dir.resolve()
    if importlib.util.find_spec("ftfy") is None:  # text cleaning, unused; with a spec, so a real diffusers imports
        refgen.module("ftfy", fix_text=lambda text: text).__spec__ = importlib.machinery.ModuleSpec("ftfy", None)
    gl.install_shims(ref)  # utils.memory/t5 stubs: only their low-memory path and text encoder use them
    import wan.modules.attention as ref_attention
    import wan.modules.causal_model as ref_causal
    import wan.modules.model as ref_model
    from omegaconf import OmegaConf

    if args.tiny:  # float32 SDPA (their fallback casts to bf16), as for the fixtures
        ref_model.flash_attention = gl.sdpa_fp32
        ref_causal.attention = gl.sdpa_fp32
    elif not (ref_attention.FLASH_ATTN_2_AVAILABLE or ref_attention.FLASH_ATTN_3_AVAILABLE):
        ref_model.flash_attention = ref_attention.attention  # their own no-flash-attn path: SDPA
    sizes = {k: getattr(wan_config, k) for k in WAN_KEYS}
    ref_causal.CausalWanModel.from_pretrained = classmethod(lambda cls, path, **kw: cls(**{**sizes, **kw}))
    import utils.wan_wrapper as wrapper
    from utils.lora_utils import configure_lora_for_model

    causal_inference = importlib.import_module("pipeline.causal_inference")
    config = OmegaConf.load(ref / "configs" / "longlive_inference.yaml")
    config.model_kwargs.local_attn_size, config.model_kwargs.sink_size = args.window, args.sink
    config.adapter.rank = config.adapter.alpha = args.rank
    with device, contextlib.redirect_stdout(io.StringIO()):
        generator = wrapper.WanDiffusionWrapper(**config.model_kwargs, is_causal=True)
        generator.model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
        if not hasattr(generator.model.config, "get"):  # refgen's diffusers stub: peft reads config.get(...)
            generator.model.config = _Config(**vars(generator.model.config))
        generator.model = configure_lora_for_model(generator.model, "generator", config.adapter, is_main_process=True)
    return config, generator, configure_lora_for_model, causal_inference


def random_lora(generator, path: Path, dtype: torch.dtype) -> int:
    """Random nonzero values for every adapter of their peft-wrapped model, saved as their trainer saves them."""
    from peft import get_peft_model_state_dict

    g = torch.Generator().manual_seed(4)
    targets = sorted(n for n, m in generator.model.named_modules() if hasattr(m, "lora_A") and m.lora_A)
    for name in targets:
        layer = generator.model.get_submodule(name)
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        a.data.copy_(torch.randn(a.shape, generator=g) / a.shape[1] ** 0.5)
        b.data.copy_(torch.randn(b.shape, generator=g) * 0.5 / b.shape[1] ** 0.5)  # peft inits B = 0
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in get_peft_model_state_dict(generator.model).items()}
    torch.save({"generator_lora": state, "critic_lora": {}, "step": 0}, path)
    return len(targets)


def their_pipeline(args, config, generator, causal_inference, prompt, device, dtype, lora_file: Path):
    """Their inference.py from the LoRA load on: set_peft_model_state_dict, (merge), to(bf16)."""
    import peft

    for _, m in generator.model.named_modules():  # forget the values: they come back from the file
        if hasattr(m, "lora_B") and m.lora_B:
            m.lora_B["default"].weight.data.zero_()
    checkpoint = torch.load(lora_file, map_location="cpu", weights_only=True)
    peft.set_peft_model_state_dict(generator.model, checkpoint["generator_lora"])
    if args.their_lora == "merged":
        generator.model = generator.model.merge_and_unload()
    with contextlib.redirect_stdout(io.StringIO()):
        pipe = causal_inference.CausalInferencePipeline(config, device=device, generator=generator,
                                                        text_encoder=refgen.PromptEmbedding(prompt), vae=refgen.NoDecode())  # fmt: skip
    if args.tiny:  # their hard-coded 1.3B sizes (30 layers, 1560 tokens, 12 heads x 128, 512 text rows)
        pipe.num_transformer_blocks = generator.model.num_layers
        h, w = args.latent_hw
        pipe.frame_seq_length = (h // 2) * (w // 2)
        sizes = {"num_heads": generator.model.num_heads, "dim": generator.model.dim, "text_len": prompt.shape[1]}
        gl.tiny_cache_methods(pipe, sizes)
    pipe = pipe.to(device=device, dtype=dtype).requires_grad_(False)  # inference.py: pipeline.to(bfloat16)
    pipe.text_encoder.embedding = prompt.to(device, dtype)
    return pipe


def run_theirs(pipe, noise: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # it prints every call
        _, latents = pipe.inference(noise=noise, text_prompts=["a prompt"], return_latents=True)
    return latents


# -- ours -------------------------------------------------------------------------------------------
def build_ours(args, variant: str):
    from inferix_core.clients.benchmark import BenchConfig, build_engine

    cfg = BenchConfig(preset="tiny" if args.tiny else "wan-1.3b", device=args.device, dtype=args.dtype,
                      window_frames=args.window, sink_frames=args.sink, compile=variant == "compile")  # fmt: skip
    pipe, context = build_engine(cfg)
    if args.tiny:  # fresh values everywhere (the init zeroes the head): a check that can fail
        refgen.randomize(pipe.model, 0)
        context = torch.randn(context.shape, generator=torch.Generator().manual_seed(1)).to(context)
    return pipe, context


def merge_ours(pipe, lora_file: Path):
    from inferix_core.models.lora import merge_loras_into_transformer, read_lora
    from inferix_core.pipeline import BlockDiffusionPipeline

    merged = merge_loras_into_transformer(pipe.model, [(read_lora(lora_file), 1.0)])
    return BlockDiffusionPipeline(merged, pipe.sampling, pipe.cache_config)


def run_ours(pipe, context, noise_source, num_blocks: int, hw) -> torch.Tensor:
    from inferix_core.pipeline import GenerationRequest

    req = GenerationRequest(
        num_blocks, hw[0], hw[1], context, noise=noise_source, final_context_pass=False
    )  # as generate_video (no kept world)
    with torch.no_grad():
        return pipe.generate(req)


# -- the run ----------------------------------------------------------------------------------------
def noise_for(args, r: int, device, dtype) -> torch.Tensor:
    """Their inference.py's noise: (B, F, 16, H, W) in bf16 on the device (float32 on CPU), seeded per run."""
    shape = (1, args.latent_frames, 16, *args.latent_hw)
    return torch.randn(shape, generator=torch.Generator().manual_seed(r)).to(device, dtype)


def prepare(args, variant: str, device, dtype, tmp: Path):
    """Ours (merged) and theirs (loaded from the same LoRA file) for one variant of ours."""
    ours, context = build_ours(args, variant)
    weights = ours.model.state_dict()
    config, generator, _, causal_inference = build_theirs(args, ours.model.config, weights, context, device, tmp)
    lora_file = tmp / "lora.pt"
    targets = random_lora(generator, lora_file, torch.float32 if args.tiny else torch.bfloat16)
    theirs = their_pipeline(args, config, generator, causal_inference, context, device, dtype, lora_file)
    return merge_ours(ours, lora_file), context, theirs, targets


def check(args) -> int:
    """CPU float32: their output latents (window, sink, LoRA merged) against ours, within 1e-4."""
    device = torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        ours, context, theirs, targets = prepare(args, "eager", device, torch.float32, Path(tmp))
        base, _ = build_ours(args, "eager")  # the same base weights without the LoRA: its effect
        noise = noise_for(args, 7, device, torch.float32)
        tap = TapNoise(noise)
        torch.manual_seed(3)
        with tap.active():
            out_theirs = run_theirs(theirs, noise)
        num_blocks = args.latent_frames // 3
        out_ours = run_ours(ours, context, tap, num_blocks, args.latent_hw)
        replay = TapNoise(noise)
        replay.draws = tap.draws
        out_base = run_ours(base, context, replay, num_blocks, args.latent_hw)
    diff, effect = sbs.max_abs_diff(out_ours, out_theirs), sbs.max_abs_diff(out_base, out_theirs)
    ok = diff < 1e-4 and effect > 1e-2 and bool(torch.isfinite(out_ours).all())
    how = "merged" if args.their_lora == "merged" else "as peft adapters in theirs, merged in ours,"
    print(f"parity (CPU fp32, {num_blocks} blocks, window {args.window} + sink {args.sink}, rank-{args.rank} LoRA "
          f"{how} on {targets} linears): max |ours - theirs| = {diff:.3e}; without the LoRA {effect:.3f} "
          f"-> {'OK' if ok else 'FAIL'}")  # fmt: skip
    sbs.write_json(args.json, {"check": {"max_abs_diff": diff, "lora_effect": effect, "ok": ok, "blocks": num_blocks,
                   "window": args.window, "sink": args.sink, "rank": args.rank, "lora_targets": targets,
                   "their_lora": args.their_lora}})  # fmt: skip
    return 0 if ok else 1


def timed(side: str, variant: str, fn, args, device, frames: int, rows: list, save) -> None:
    try:
        result, _ = sbs.time_runs(fn, device, args.warmup, args.repeats, frames)
        rows.append({"side": side, "variant": variant, **result})
        print(f"{side} {variant}: {result['median_total_s']:.3f} s, {result['fps']:.2f} FPS", flush=True)
    except Exception as exc:  # one failing side must not lose the other rows; it is reported
        rows.append({"side": side, "variant": variant, "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
        print(f"{side} {variant} FAILED: {rows[-1]['error']}", flush=True)
    save()


def run_all(args, device, dtype, frames: int, rows: list, outputs: dict, meta: dict, save) -> None:
    """Theirs once (eager; its warm-up records the re-noise draws), then ours in every variant (each warm-up
    replays those draws), all from the same base weights and the same LoRA file."""
    from inferix_core.pipeline import SeededNoise

    variants = args.variants.split(",")
    taps: dict[int, TapNoise] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ours, context, theirs, targets = prepare(args, variants[0], device, dtype, Path(tmp))
        held = {"theirs": theirs}  # dropped after its rows, before ours run
        del theirs
        meta["lora_targets"] = targets
        lora_file = Path(tmp) / "lora.pt"

        def their_run(r: int) -> torch.Tensor:
            noise = noise_for(args, r, device, dtype)
            torch.manual_seed(r)
            if r != 0:
                return run_theirs(held["theirs"], noise)
            taps[r] = tap = TapNoise(noise)
            with tap.active():
                out = run_theirs(held["theirs"], noise)
            outputs[("theirs", "warmup")] = out.float().cpu()
            return out

        timed("theirs", "eager", their_run, args, device, frames, rows, save)
        held.clear()
        sbs.free_memory()
        num_blocks = args.latent_frames // ours.sampling.block_frames
        for variant in variants:
            if ours is None:
                ours = merge_ours(build_ours(args, variant)[0], lora_file)

            def our_run(r: int, pipe=ours, variant=variant) -> torch.Tensor:
                noise = noise_for(args, r, device, dtype)
                if r in taps:  # the warm-up replays their draws: the outputs are comparable
                    replay = TapNoise(noise)
                    replay.draws = taps[r].draws
                    out = run_ours(pipe, context, replay, num_blocks, args.latent_hw)
                    outputs[("ours", variant, "warmup")] = out.float().cpu()
                    return out
                return run_ours(pipe, context, SeededNoise(r, device=device), num_blocks, args.latent_hw)

            timed("ours", variant, our_run, args, device, frames, rows, save)
            ours = None
            sbs.free_memory()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", type=Path, required=True, help="a NVlabs/LongLive v1.0 checkout or .ref/ll1")
    p.add_argument("--variants", default="eager,compile", help="ours: comma list of eager, compile (theirs: eager)")
    p.add_argument("--their-lora", default="merged", choices=["merged", "peft"], help="theirs: merged or peft adapters")
    p.add_argument("--latent-frames", type=int, default=None, help="default 21 (81 frames); --tiny: 12")
    p.add_argument("--window", type=int, default=None, help="local_attn_size in latent frames (LongLive: 12)")
    p.add_argument("--sink", type=int, default=3, help="sink_size in latent frames (LongLive: 3)")
    p.add_argument("--rank", type=int, default=None, help="LoRA rank = alpha (LongLive: 256; --tiny: 4)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="the tiny CPU model (8x12 latents) instead of 1.3B at 480x832")
    p.add_argument("--check", action="store_true", help="with --tiny: CPU fp32 parity of theirs and ours, then exit")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.latent_frames = args.latent_frames or (12 if args.tiny else 21)
    args.window = args.window or (6 if args.tiny else 12)
    args.rank = args.rank or (4 if args.tiny else 256)
    args.latent_hw = (8, 12) if args.tiny else (60, 104)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.check:
        if not args.tiny:
            raise SystemExit("--check runs at the tiny config: add --tiny")
        args.device, args.dtype = "cpu", "fp32"
        return check(args)
    args.dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    if args.device == "cpu" and not args.tiny:
        raise SystemExit("the full-size comparison needs a CUDA GPU (or pass --tiny for a CPU smoke run)")
    device, dtype = torch.device(args.device), {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    frames = sbs.pixel_frames(args.latent_frames)
    rows: list[dict] = []
    outputs: dict = {}
    meta = {**sbs.device_info(device), "frames": frames, "latent_frames": args.latent_frames, "dtype": args.dtype,
            "geometry": "tiny 8x12 latents" if args.tiny else "480x832 (60x104 latents)", "window": args.window,
            "sink": args.sink, "lora_rank": args.rank, "their_lora": args.their_lora, "block_frames": 3}  # fmt: skip

    def save():
        diffs = {f"ours_{v}_vs_theirs_warmup": sbs.max_abs_diff(outputs.get(("ours", v, "warmup")),
                 outputs.get(("theirs", "warmup"))) for v in args.variants.split(",")}  # fmt: skip
        sbs.write_json(args.json, {**meta, "rows": rows, "max_abs_diff": diffs,
                                   "speedup": sbs.speedups(rows, "theirs", baseline="eager")})  # fmt: skip

    if any(v not in ("eager", "compile") for v in args.variants.split(",")):
        raise SystemExit(f"unknown variant in '{args.variants}'; expected eager and/or compile")
    run_all(args, device, dtype, frames, rows, outputs, meta, save)
    sbs.print_table(f"{meta['gpu']}, torch {meta['torch']}, {frames} frames, {meta['geometry']}, {args.dtype}; "
                    f"window {args.window} + sink {args.sink}, rank-{args.rank} LoRA ({args.their_lora} in theirs)",
                    rows, "theirs", baseline="eager")  # fmt: skip
    save()
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
