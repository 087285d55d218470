"""Matrix-Game 2.0: ours vs the authors' `CausalInferencePipeline`, side by side in one process.

Random weights at the real shape (causal Wan 2.1 1.3B i2v, in_dim 36, action modules in blocks 0–14,
CLIP context 257 × 1280), 352×640 (44×80 latents, 880 tokens per latent frame), each variant's own
steps and window (universal / gta_drive: 3 steps, window 6 / 4; templerun: 4 steps, keyboard only),
bf16, diffusion only (the VAE decode after each block is not timed on either side). Reported: total
seconds, FPS = pixel frames (1 + 4·(F − 1)) / total, time to the first clean block, peak GPU memory.

The reference is not part of this repository and nothing of it is copied: pass a checkout of
github:zoheth/Matrix-Game at 3ceb3114 (its `Matrix-Game-2/` folder, e.g. /work/ref/matrix-game-3ceb3114/
Matrix-Game-2) with `--reference-dir`; its modules are imported from there and run as its `inference.py`
runs them (`pipeline.to(dtype=bf16)`, `CausalInferencePipeline.inference(noise, conditional_dict, mode=…)`),
with these substitutions that change no timed work:

* random weights (the config dict goes to `WanDiffusionWrapper(model_config=…)`), random conditioning
  (cond_concat with the exact mask, CLIP tokens, per-pixel-frame actions) instead of the VAE/CLIP encoders;
* its per-block VAE decoder is a stand-in that returns the latents;
* import shims where a package is missing: `diffusers` (model base classes: nn.Module with `dtype`, a
  `from_config` that calls the constructor, a no-op `register_to_config`), `flash_attn` (its action
  module imports `flash_attn_func` unconditionally: SDPA in its (B, L, H, D) layout, and the transformer's
  `attention()` / `flash_attention()` go to the same SDPA in the input dtype, which for bf16 is what its own
  no-flash-attn fallback runs), `wan.modules.tokenizers`,
  `utils.visualize` (cv2) and `demo_utils.constant` (2 GB of zero VAE caches it then sets to None);
  the `wan` / `wan.modules` package initialisers are skipped (they import T5, CLIP and the VAE).
* `--smoke` (CPU, tiny model: dim 64, 2 layers, one action block, 2 action heads, same 352×640 geometry, 2
  blocks) also replaces its three cache initialisers, which hard-code the 1.3B head shapes
  ([B, ·, 12, 128], [·, ·, 16, 64]), with the same dicts at the tiny shapes, and sets its
  `num_transformer_blocks` (30) to the tiny layer count; the parameters its init leaves at zero (head,
  action projections) get random values, and ours then runs with its weights and its recorded noise draws, so
  the run also reports max |ours − reference| over the latents (≈ 1e-6 in fp32). It exists so that
  tests/test_bench_matrix_game2.py knows the script runs and compares the same computation; its timings
  mean nothing.

    PYTHONPATH=. python bench/bench_matrix_game2.py --reference-dir /work/ref/matrix-game-3ceb3114/Matrix-Game-2 \\
        --variants universal,gta_drive,templerun --json mg2_bench.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import importlib.util
import io
import json
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from inferix_core.engine.conditioning import matrix_game_request
from inferix_core.models.matrix_game2 import (
    MATRIX_GAME2_VARIANTS,
    MatrixGameConditioning,
    cond_concat_from_latent,
    pixel_frames,
)
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline

# Matrix-Game-2/configs/distilled_model/<variant>/config.json at 3ceb3114 (the action block list, widths)
REAL = dict(model_type="i2v", patch_size=[1, 2, 2], text_len=512, in_dim=36, dim=1536, ffn_dim=8960, freq_dim=256,
            text_dim=4096, out_dim=16, num_heads=12, num_layers=30, qk_norm=True, cross_attn_norm=True, eps=1e-6)  # fmt: skip
REAL_ACTION = dict(blocks=list(range(15)), heads_num=16, hidden_size=128, img_hidden_size=1536, keyboard_hidden_dim=1024,
                   mouse_hidden_dim=1024, mouse_qk_dim_list=[8, 28, 28], patch_size=[1, 2, 2], qk_norm=True,
                   qkv_bias=False, rope_dim_list=[8, 28, 28], rope_theta=256, vae_time_compression_ratio=4,
                   windows_size=3, enable_keyboard=True)  # fmt: skip
SMOKE = dict(REAL, dim=64, ffn_dim=128, freq_dim=32, num_heads=4, num_layers=2)
SMOKE_ACTION = dict(REAL_ACTION, blocks=[0], heads_num=2, hidden_size=8, img_hidden_size=64, keyboard_hidden_dim=128,
                    mouse_hidden_dim=128)  # fmt: skip
CLIP_TOKENS, CLIP_DIM, LATENT_HW = 257, 1280, (44, 80)


def model_config(variant: str, smoke: bool) -> dict:
    v = MATRIX_GAME2_VARIANTS[variant]
    base, action = (SMOKE, SMOKE_ACTION) if smoke else (REAL, REAL_ACTION)
    action = dict(action, keyboard_dim_in=v.keyboard_dim, enable_mouse=v.mouse)
    if v.mouse:
        action["mouse_dim_in"] = 2
    else:  # the templerun config.json has no mouse keys
        for k in ("mouse_hidden_dim", "mouse_qk_dim_list"):
            action.pop(k)
        action["mouse_dim_in"] = 2
    return dict(base, local_attn_size=v.cache.window_frames, sink_size=0, action_config=action)


def conditioning(variant: str, latent_frames: int, device, dtype, seed: int = 0) -> MatrixGameConditioning:
    """Random stand-ins for the encoders' outputs, with the exact mask and the demos' action ranges."""
    v = MATRIX_GAME2_VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    h, w = LATENT_HW
    rows = pixel_frames(latent_frames)
    cond = cond_concat_from_latent(torch.randn(1, 16, latent_frames, h, w, generator=g))
    keyboard = (torch.rand(1, rows, v.keyboard_dim, generator=g) < 0.3).float()
    mouse = (torch.randint(-1, 2, (1, rows, 2), generator=g) * 0.1).float() if v.mouse else None
    visual = torch.randn(1, CLIP_TOKENS, CLIP_DIM, generator=g)
    move = lambda t: None if t is None else t.to(device, dtype)  # noqa: E731
    return MatrixGameConditioning(move(cond), move(visual), move(keyboard), move(mouse))


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device) -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0


def _summary(times, firsts, peaks, latent_frames) -> dict:
    total = statistics.median(times)
    return {"median_total_s": total, "fps": pixel_frames(latent_frames) / total, "runs_s": times,
            "first_block_s": statistics.median(firsts), "peak_gib": max(peaks)}  # fmt: skip


# -- ours -------------------------------------------------------------------------------------------------------
class ReplayNoise:
    """The reference run's own draws ([1, 16, F, H, W] noise, then its [n, 16, H, W] re-noise draws in call
    order), handed to our pipeline in its layout, so that both sides see the same numbers."""

    def __init__(self, noise: torch.Tensor, draws: list[torch.Tensor]):
        self.noise, self.draws = noise, iter(draws)

    def initial(self, start_frame, shape):
        return self.noise[:, :, start_frame : start_frame + shape[1]].permute(0, 2, 1, 3, 4)

    def step(self, block, step, shape):
        return next(self.draws).unsqueeze(0)


def run_ours(variant, latent_frames, device, dtype, warmup, repeats, smoke, compile=False, weights=None,
             replay=None) -> dict:  # fmt: skip
    """Time our pipeline; with `weights` and `replay` (the reference's state dict and (noise, draws), smoke
    mode) also return the latents of the last run, for a numerical comparison."""
    v = MATRIX_GAME2_VARIANTS[variant]
    torch.manual_seed(0)
    with torch.device(device):
        model = CausalWanTransformer(WanConfig.from_dict(model_config(variant, smoke)))
    if weights is not None:
        model.load_state_dict(weights, strict=True)
    model = model.to(dtype).eval().requires_grad_(False)
    if compile:
        from inferix_core.models.wan.causal_transformer import compile_blocks

        compile_blocks(model)
    pipe = BlockDiffusionPipeline(model, v.sampling, v.cache)
    cond = conditioning(variant, latent_frames, device, dtype)
    n = v.sampling.block_frames
    times, firsts, peaks = [], [], []
    for r in range(warmup + repeats):
        _sync(device)
        _peak_reset(device)
        t0 = time.perf_counter()
        first, blocks = None, []
        noise = ReplayNoise(*replay) if replay is not None else None
        for block in pipe.stream(matrix_game_request(cond, latent_frames // n, seed=r, noise=noise)):
            blocks.append(block.latents)
            if first is None:
                _sync(device)
                first = time.perf_counter() - t0
        _sync(device)
        if not torch.isfinite(blocks[-1]).all():
            raise RuntimeError("ours produced non-finite values")
        if r >= warmup:
            times.append(time.perf_counter() - t0)
            firsts.append(first)
            peaks.append(_peak_gib(device))
    del pipe, model
    gc.collect()
    out = _summary(times, firsts, peaks, latent_frames)
    if replay is not None:
        out["latents"] = torch.cat(blocks, dim=1).permute(0, 2, 1, 3, 4)  # [B, C, F, H, W] as the reference's
    return out


# -- the reference ----------------------------------------------------------------------------------------------
def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _sdpa_blhd(q, k, v, *args, causal=False, **kwargs):
    """flash_attn_func's (B, L, H, D) contract on torch SDPA (no mask, default scale)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def _install_import_shims(ref: Path) -> None:
    if str(ref) in sys.path:
        return
    sys.path.insert(0, str(ref))
    if importlib.util.find_spec("diffusers") is None:

        class ModelMixin(torch.nn.Module):
            @property
            def dtype(self):
                return next(self.parameters()).dtype

            @classmethod
            def from_config(cls, config):
                import inspect

                names = set(inspect.signature(cls.__init__).parameters)
                return cls(**{k: v for k, v in config.items() if k in names})

        mixins = {name: type(name, (), {}) for name in ("ConfigMixin", "FromOriginalModelMixin", "PeftAdapterMixin")}
        _module("diffusers")
        _module("diffusers.configuration_utils", ConfigMixin=mixins["ConfigMixin"], register_to_config=lambda fn: fn)
        _module("diffusers.loaders", FromOriginalModelMixin=mixins["FromOriginalModelMixin"],
                PeftAdapterMixin=mixins["PeftAdapterMixin"])  # fmt: skip
        _module("diffusers.models")
        _module("diffusers.models.modeling_utils", ModelMixin=ModelMixin)
    if importlib.util.find_spec("flash_attn") is None:
        _module("flash_attn", flash_attn_func=_sdpa_blhd, inferix_stub=True)
    for pkg in ("wan", "wan/modules", "demo_utils", "utils"):
        _module(pkg.replace("/", "."), __path__=[str(ref / pkg)])
    _module("wan.modules.tokenizers", HuggingfaceTokenizer=None)
    _module("utils.visualize", process_video=None)
    _module("demo_utils.constant", ZERO_VAE_CACHE=[])


class _LatentsAsVideo:
    """Stands in for the per-block VAE decoder: returns the latents, keeps the (empty) cache."""

    def __call__(self, latents, *cache):
        return latents, list(cache)


def _tiny_cache_initialisers(pipe, cfg: dict) -> None:
    """The reference's three cache initialisers at the tiny model's shapes (same dicts; smoke mode only)."""
    heads, head_dim = cfg["num_heads"], cfg["dim"] // cfg["num_heads"]
    action_heads = cfg["action_config"]["heads_num"]

    def zeros(*shape, dtype, device):
        return torch.zeros(shape, dtype=dtype, device=device)

    def index(device):
        return torch.tensor([0], dtype=torch.long, device=device)

    def kv(batch, size, h, d, dtype, device):
        return {"k": zeros(batch, size, h, d, dtype=dtype, device=device),
                "v": zeros(batch, size, h, d, dtype=dtype, device=device),
                "global_end_index": index(device), "local_end_index": index(device)}  # fmt: skip

    def main(batch_size, dtype, device):
        size = pipe.local_attn_size * pipe.frame_seq_length
        pipe.kv_cache1 = [
            kv(batch_size, size, heads, head_dim, dtype, device) for _ in range(pipe.num_transformer_blocks)
        ]

    def action(batch_size, dtype, device):
        s, n = pipe.frame_seq_length, pipe.local_attn_size
        pipe.kv_cache_keyboard = [
            kv(batch_size, n, action_heads, 64, dtype, device) for _ in range(pipe.num_transformer_blocks)
        ]
        pipe.kv_cache_mouse = [
            kv(batch_size * s, n, action_heads, 64, dtype, device) for _ in range(pipe.num_transformer_blocks)
        ]

    def cross(batch_size, dtype, device):
        pipe.crossattn_cache = [{"k": None, "v": None, "is_init": False} for _ in range(pipe.num_transformer_blocks)]

    pipe._initialize_kv_cache, pipe._initialize_kv_cache_mouse_and_keyboard = main, action
    pipe._initialize_crossattn_cache = cross
    pipe.num_transformer_blocks = cfg["num_layers"]


def build_reference(ref: Path, variant: str, device, dtype, smoke: bool):
    _install_import_shims(ref)
    current_device = torch.cuda.current_device
    if device.type != "cuda":  # its action-RoPE table is built on torch.cuda.current_device() (at construction)
        torch.cuda.current_device = lambda: "cpu"
    try:
        return _build_reference(ref, variant, device, dtype, smoke)
    finally:
        torch.cuda.current_device = current_device


def _build_reference(ref: Path, variant: str, device, dtype, smoke: bool):
    import utils.wan_wrapper as wrapper  # the reference's modules, from --reference-dir
    import wan.modules.attention as ref_attention
    import wan.modules.causal_model as ref_causal
    import wan.modules.model as ref_model

    if getattr(sys.modules["flash_attn"], "inferix_stub", False):  # no real flash-attn: SDPA everywhere
        # its own fallback is SDPA after a cast to bf16 (a no-op for the bf16 runs; wrong dtype for the fp32 smoke)
        # and its cross-attention calls flash_attention(), which asserts flash-attn: both go to SDPA in the input dtype
        ref_attention.FLASH_ATTN_2_AVAILABLE = False
        ref_model.flash_attention = ref_causal.attention = _sdpa_blhd
    causal_inference = _load(ref / "pipeline" / "causal_inference.py", "reference_mg2_causal_inference")
    v = MATRIX_GAME2_VARIANTS[variant]
    cfg = model_config(variant, smoke)
    args = types.SimpleNamespace(
        denoising_step_list=list(v.sampling.denoising_steps), warp_denoising_step=True, num_frame_per_block=3,
        context_noise=0, mode=variant, model_kwargs={"timestep_shift": v.sampling.shift},
    )  # fmt: skip
    torch.manual_seed(0)
    with device, contextlib.redirect_stdout(io.StringIO()):
        generator = wrapper.WanDiffusionWrapper(model_config=copy.deepcopy(cfg), timestep_shift=5.0, is_causal=True)
    # outside the device context, as their inference.py builds it: its step table mixes a .cpu() tensor with a
    # new torch.tensor, which a CUDA default device would put on the GPU
    with contextlib.redirect_stdout(io.StringIO()):
        pipe = causal_inference.CausalInferencePipeline(args, device=device, generator=generator,
                                                        vae_decoder=_LatentsAsVideo())  # fmt: skip
    if smoke:
        _tiny_cache_initialisers(pipe, cfg)
        with torch.no_grad():  # its init zeroes the head and the action projections: flows would all be 0
            g = torch.Generator().manual_seed(1)
            for param in pipe.generator.model.parameters():
                if not param.any():
                    param.copy_(torch.randn(param.shape, generator=g) * param.shape[-1] ** -0.5)
    return pipe.to(device=device, dtype=dtype).requires_grad_(False)


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_reference(ref, variant, latent_frames, device, dtype, warmup, repeats, smoke) -> dict:
    pipe = build_reference(ref, variant, device, dtype, smoke)
    cond = conditioning(variant, latent_frames, device, dtype)
    h, w = LATENT_HW
    times, firsts, peaks = [], [], []
    for r in range(warmup + repeats):
        torch.manual_seed(r)
        noise = torch.randn(1, 16, latent_frames, h, w, device=device, dtype=dtype)
        cond_dict = {"cond_concat": cond.cond_concat, "visual_context": cond.visual_context,
                     "keyboard_cond": cond.keyboard}  # fmt: skip
        if cond.mouse is not None:
            cond_dict["mouse_cond"] = cond.mouse
        first = []
        decoder = pipe.vae_decoder
        _sync(device)
        _peak_reset(device)
        t0 = time.perf_counter()

        def timed_decoder(latents, *cache, decoder=decoder, first=first, t0=t0):
            if not first:  # the first block's latents reach the decoder: its first frame is due
                _sync(device)
                first.append(time.perf_counter() - t0)
            return decoder(latents, *cache)

        pipe.vae_decoder = timed_decoder
        draws = []
        randn_like = torch.randn_like
        if smoke:  # record its re-noise draws (randn_like keeps the strides of its permuted input) for ours

            def recorded(x, *a, draws=draws, randn_like=randn_like, **k):
                draws.append(randn_like(x, *a, **k))
                return draws[-1]

            torch.randn_like = recorded
        try:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                latents = pipe.inference(noise, cond_dict, return_latents=True, mode=variant)  # still decodes per block
        finally:
            torch.randn_like = randn_like
        _sync(device)
        pipe.vae_decoder = decoder
        if not torch.isfinite(latents).all():
            raise RuntimeError("the reference produced non-finite values")
        if r >= warmup:
            times.append(time.perf_counter() - t0)
            firsts.append(first[0])
            peaks.append(_peak_gib(device))
    out = _summary(times, firsts, peaks, latent_frames)
    if smoke:  # its weights, draws and last latents, for the numerical comparison with ours
        out["weights"] = {k: v.detach().clone() for k, v in pipe.generator.model.state_dict().items()}
        out["replay"] = (noise.clone(), [d.clone() for d in draws])
        out["latents"] = latents.float()
    del pipe
    gc.collect()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", type=Path, help="the authors' Matrix-Game-2 folder (omit to run ours only)")
    p.add_argument("--variants", default="universal,gta_drive,templerun")
    p.add_argument("--latent-frames", type=int, default=30, help="latent frames per run (a multiple of 3)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also run ours with compile_blocks")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny model, 2 blocks: checks the script runs")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.smoke:
        device, dtype, frames, warmup, repeats = torch.device("cpu"), torch.float32, 6, 0, 1
    else:
        if not torch.cuda.is_available():
            raise SystemExit("bench_matrix_game2 needs a CUDA GPU (or --smoke)")
        device, dtype, frames, warmup, repeats = (torch.device("cuda"), torch.bfloat16, args.latent_frames,
                                                  args.warmup, args.repeats)  # fmt: skip
    rows = []
    failed = []

    def attempt(label: str, fn):
        """One failing run must not lose the other rows (on the GPU); it is reported, and fails the smoke run."""
        try:
            return fn()
        except Exception as exc:
            if args.smoke:
                raise
            print(f"{label} FAILED: {type(exc).__name__}: {str(exc)[:300]}")
            failed.append(label)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            return None

    for variant in args.variants.split(","):
        if variant not in MATRIX_GAME2_VARIANTS:
            raise SystemExit(f"unknown variant '{variant}'; expected {', '.join(MATRIX_GAME2_VARIANTS)}")
        weights = replay = ref_row = None
        if args.reference_dir is not None:
            ref_row = attempt(f"{variant} reference", lambda v=variant: run_reference(
                args.reference_dir, v, frames, device, dtype, warmup, repeats, args.smoke))  # fmt: skip
            if ref_row is not None:
                rows.append((variant, "reference", ref_row))
                weights, replay = ref_row.pop("weights", None), ref_row.pop("replay", None)
        ours = attempt(f"{variant} ours", lambda v=variant, w=weights, rp=replay: run_ours(
            v, frames, device, dtype, warmup, repeats, args.smoke, weights=w, replay=rp))  # fmt: skip
        if ours is not None and weights is not None:  # smoke: same weights and noise on both sides, same latents
            ours["max_abs_diff_vs_reference"] = float((ours.pop("latents") - ref_row["latents"]).abs().max())
            print(f"{variant}: max |ours - reference| over the latents = {ours['max_abs_diff_vs_reference']:.2e}")
        if ref_row is not None:
            ref_row.pop("latents", None)  # not JSON
        if ours is not None:
            rows.append((variant, "ours", ours))
        if args.compile:
            compiled = attempt(f"{variant} ours compile", lambda v=variant: run_ours(
                v, frames, device, dtype, warmup, repeats, args.smoke, compile=True))  # fmt: skip
            if compiled is not None:
                rows.append((variant, "ours compile", compiled))
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)"
    print(
        f"{gpu}, torch {torch.__version__}, 352x640, {frames} latent frames ({pixel_frames(frames)} pixel frames), {dtype}"
    )
    print(f"{'variant':<10} {'run':<13} {'total s':>8} {'FPS':>7} {'first block s':>13} {'peak GiB':>8} {'vs ref':>7}")
    ref = {v: r for v, who, r in rows if who == "reference"}
    for v, who, r in rows:
        speed = f"{ref[v]['median_total_s'] / r['median_total_s']:.2f}x" if v in ref else "-"
        print(f"{v:<10} {who:<13} {r['median_total_s']:8.3f} {r['fps']:7.2f} {r['first_block_s']:13.3f} "
              f"{r['peak_gib']:8.2f} {speed:>7}")  # fmt: skip
    if args.json:
        payload = {"device": gpu, "torch": torch.__version__, "latent_frames": frames, "dtype": str(dtype),
                   "rows": [{"variant": v, "run": who, **r} for v, who, r in rows], "failed": failed}  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
