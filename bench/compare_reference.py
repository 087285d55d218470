"""Ours vs the reference (Self-Forcing's `CausalInferencePipeline`) on one GPU, in one process.

The reference is not part of this repository and nothing of it is copied here: pass a checkout of
github.com/guandeh17/Self-Forcing with `--reference-dir`; its modules are imported from there. Both
sides run the protocol of `inferix bench` (docs/performance.md): random-weight Wan 2.1 T2V 1.3B,
480×832, 21 latent frames (81 pixel frames), 3-frame blocks, 4 steps [1000, 750, 500, 250] warped
with shift 5, context pass at t=0, bf16, CUDA-event timing, warm-up then median of the repeats.

The reference is run as its `inference.py` runs it (`pipeline.to(dtype=torch.bfloat16)`, bf16 noise,
SDPA when flash-attn is absent) with two substitutions that change no timed work: random weights
instead of `from_pretrained` files, and a fixed random prompt embedding instead of its umT5 encoder
(text encoding is outside both timings). "diffusion" times `inference()` with a decoder that returns
the latents (no decode); "end to end" times it with the Wan VAE architecture (random weights) doing
its one full decode at the end, which is when the reference shows its first frame.

Import shims (bench/fixtures/refgen.py, shared with the fixture generators; only where the package is
missing on the GPU machine): `diffusers` (the model base classes: plain nn.Module and a config decorator
that keeps the constructor arguments, as diffusers does) and `ftfy` (text cleaning, unused here); the
`wan` and `wan.modules` package initialisers are skipped because they import the whole model zoo.
Without flash-attn, the reference's cross-attention (which calls `flash_attention` directly and
asserts flash-attn) is routed to its own `attention()`, whose fallback is torch SDPA: the reference
then runs SDPA everywhere, as the issue's reference numbers were measured.

    PYTHONPATH=. python bench/compare_reference.py --reference-dir /path/to/Self-Forcing \\
        --variants eager,compile,graphs,compile+graphs,compile+graphs+fa4 --json compare.json

End to end uses the Wan VAE decode options `load_world_model` gives on CUDA (the benchmark measures what
users run); `+vaeref` measures the reference decode path instead.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import statistics
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import refgen  # the import shims shared with the fixture generators

from inferix_core.clients.benchmark import VARIANT_PARTS, decoder_only, variant_options
from inferix_core.errors import ConfigError

WAN_13B = dict(
    model_type="t2v", patch_size=(1, 2, 2), text_len=512, in_dim=16, dim=1536, ffn_dim=8960, freq_dim=256,
    text_dim=4096, out_dim=16, num_heads=12, num_layers=30, qk_norm=True, cross_attn_norm=True, eps=1e-6,
)  # fmt: skip
LATENT_SHAPE = (1, 21, 16, 60, 104)  # (B, F, C, H, W) as the reference takes noise
PIXEL_FRAMES = 81


# -- the reference ----------------------------------------------------------------------------------
def _install_import_shims(ref: Path) -> None:
    """The shared diffusers/ftfy stubs of the reference runs (bench/fixtures/refgen.py); `wan` and
    `wan.modules` package initialisers skipped (they import the whole model zoo)."""
    refgen.install_shims(ref, ["wan", "wan/modules"])


def build_reference_pipeline(ref: Path, device: torch.device, decode: bool):
    _install_import_shims(ref)
    import utils.wan_wrapper as wrapper  # the reference's module, from --reference-dir
    import wan.modules.attention as ref_attention
    import wan.modules.model as ref_model
    from wan.modules.causal_model import CausalWanModel
    from wan.modules.vae import WanVAE_

    if ref_attention.FLASH_ATTN_2_AVAILABLE and not hasattr(ref_attention.flash_attn, "flash_attn_varlen_func"):
        # flash-attn-4 (our `fa4` extra) ships a `flash_attn` package without the FlashAttention-2 API the
        # reference calls: it runs as it does without flash-attn (torch SDPA), said in the output
        print("reference: `flash_attn` is flash-attn-4 (no flash_attn_varlen_func); the reference uses its SDPA path")
        ref_attention.FLASH_ATTN_2_AVAILABLE = False
    if not (ref_attention.FLASH_ATTN_2_AVAILABLE or ref_attention.FLASH_ATTN_3_AVAILABLE):
        # its cross-attention calls flash_attention() directly, which asserts flash-attn; route it to the
        # reference's own attention(), whose no-flash-attn path is torch SDPA (as its self-attention does)
        ref_model.flash_attention = ref_attention.attention

    CausalWanModel.from_pretrained = classmethod(lambda cls, path, **kw: cls(**{**WAN_13B, **kw}))
    wrapper._video_vae = lambda pretrained_path=None, z_dim=16, **kw: WanVAE_(
        dim=96, z_dim=z_dim, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
        temperal_downsample=[False, True, True], dropout=0.0,
    )  # fmt: skip
    causal_inference = refgen.load_file("reference_causal_inference", ref / "pipeline" / "causal_inference.py")
    args = types.SimpleNamespace(
        denoising_step_list=[1000, 750, 500, 250], warp_denoising_step=True, num_frame_per_block=3,
        independent_first_frame=False, context_noise=0, model_kwargs={"timestep_shift": 5.0},
    )  # fmt: skip
    torch.manual_seed(0)
    with device:
        generator = wrapper.WanDiffusionWrapper(**args.model_kwargs, is_causal=True)
        vae = wrapper.WanVAEWrapper() if decode else refgen.NoDecode()
        prompt = torch.randn(1, 512, 4096)
    with contextlib.redirect_stdout(io.StringIO()):
        pipe = causal_inference.CausalInferencePipeline(
            args, device=device, generator=generator, text_encoder=refgen.PromptEmbedding(prompt), vae=vae
        )
    pipe = pipe.to(dtype=torch.bfloat16).requires_grad_(False)  # inference.py sets torch.set_grad_enabled(False)
    pipe.text_encoder.embedding = prompt.to(torch.bfloat16)
    return pipe


def run_reference(ref: Path, device: torch.device, decode: bool, warmup: int, repeats: int) -> dict:
    pipe = build_reference_pipeline(ref, device, decode)
    times, peaks = [], []
    for r in range(warmup + repeats):
        torch.manual_seed(r)
        noise = torch.randn(LATENT_SHAPE, device=device, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # it prints every step
            start.record()
            video = pipe.inference(noise, text_prompts=["a prompt"])
            end.record()
        torch.cuda.synchronize()
        if not torch.isfinite(video).all():
            raise RuntimeError("the reference produced non-finite values")
        if r >= warmup:
            times.append(start.elapsed_time(end) / 1000)
            peaks.append(torch.cuda.max_memory_allocated())
    del pipe, video
    gc.collect()
    torch.cuda.empty_cache()
    total = statistics.median(times)
    return {
        "median_total_s": total, "fps": PIXEL_FRAMES / total, "runs_s": times, "peak_gib": max(peaks) / 2**30,
        # the reference yields no frame before inference() returns: its first frame is its total time
        "first_frame_s": total,
    }  # fmt: skip


# -- ours -------------------------------------------------------------------------------------------
VARIANTS = VARIANT_PARTS  # inferix_core/clients/benchmark.py: one table for this script and `inferix bench --variants`


def run_ours(variant: str, warmup: int, repeats: int, **extra) -> dict:
    from inferix_core.clients.benchmark import BenchConfig, run_engine_benchmark

    try:
        opts = variant_options(variant)  # "compile+cudnn" = both
    except ConfigError as exc:
        raise SystemExit(str(exc)) from exc
    result = run_engine_benchmark(BenchConfig(warmup=warmup, repeats=repeats, **opts, **extra))
    gc.collect()
    torch.cuda.empty_cache()
    return {
        "median_total_s": result["median_total_s"], "fps": result["fps"], "peak_gib": result["peak_gib"],
        "first_frame_s": result["median_first_block_s"], "runs_s": [r["total_s"] for r in result["runs"]],
        "median_block_s": result["median_block_s"], "cuda_graphs": result.get("cuda_graphs"),
        "vae_options": result.get("vae_options"), "attention": result.get("attention_effective"),
        "peak_reserved_gib": result.get("peak_reserved_gib"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", type=Path, help="a Self-Forcing checkout (omit to run ours only)")
    p.add_argument("--variants", default="eager,compile+cudnn", help=f"comma list of ours: {', '.join(VARIANTS)}")
    p.add_argument(
        "--what",
        default="diffusion",
        choices=["diffusion", "e2e", "both"],
        help="diffusion alone, end to end with the Wan VAE decoding, or both",
    )
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("compare_reference needs a CUDA GPU")
    device = torch.device("cuda")
    rows: list[tuple[str, str, dict]] = []
    diffusion, e2e = args.what in ("diffusion", "both"), args.what in ("e2e", "both")
    if args.reference_dir is not None:
        if diffusion:
            rows.append(
                ("reference", "diffusion", run_reference(args.reference_dir, device, False, args.warmup, args.repeats))
            )
        if e2e:
            rows.append(
                (
                    "reference",
                    "end to end (Wan VAE)",
                    run_reference(args.reference_dir, device, True, args.warmup, args.repeats),
                )
            )

    def save() -> None:  # after every row, so that a run stopped by a time limit keeps what it measured
        if args.json:
            payload = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": [
                {"run": who, "what": kind, **r} for who, kind, r in rows]}  # fmt: skip
            args.json.write_text(json.dumps(payload, indent=2))

    save()
    for variant in args.variants.split(","):
        for wanted, kind, extra in ((diffusion, "diffusion", {}), (e2e, "end to end (Wan VAE)", {"vae_decode": True})):
            if not wanted or (decoder_only(variant) and kind == "diffusion"):  # decoder levers change no diffusion time
                continue
            try:
                rows.append((f"ours {variant}", kind, run_ours(variant, args.warmup, args.repeats, **extra)))
                r = rows[-1][2]
                print(f"ours {variant} {kind}: {r['median_total_s']:.3f} s, first frame {r['first_frame_s']:.3f} s, "
                      f"peak {r['peak_gib']:.2f} GiB ({r['peak_reserved_gib']:.2f} reserved), "
                      f"graphs {r.get('cuda_graphs')}", flush=True)  # fmt: skip
                save()
            except Exception as exc:  # one failing lever must not lose the other rows; it is reported
                print(f"ours {variant} {kind} FAILED: {type(exc).__name__}: {str(exc)[:300]}")
    ref = {kind: r for who, kind, r in rows if who == "reference"}
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, 81 frames, 480x832, bf16")
    print(f"{'run':<24} {'what':<22} {'total s':>8} {'FPS':>6} {'first frame s':>13} {'peak GiB':>8} {'vs ref':>7}")
    for who, kind, r in rows:
        speedup = f"{ref[kind]['median_total_s'] / r['median_total_s']:.2f}x" if kind in ref else "-"
        print(
            f"{who:<24} {kind:<22} {r['median_total_s']:8.3f} {r['fps']:6.1f} {r['first_frame_s']:13.3f} {r['peak_gib']:8.2f} {speedup:>7}"
        )
    for who, kind, r in rows:  # say whether the graphs ran: a refused or failed capture is an eager run
        if r.get("cuda_graphs") is not None:
            print(f"{who} {kind}: CUDA graphs {r['cuda_graphs']}")
    if args.json:
        save()
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
