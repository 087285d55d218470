"""A fixed benchmark protocol for the engine: random-weight Wan, fixed geometry, warm-up, medians.

Timings use CUDA events on GPU (synchronised once per repeat, after the run) and perf_counter on CPU.
Diffusion FPS counts *pixel* frames: 21 latent frames decode to 1 + 4·20 = 81 frames, so 81 frames over
the denoising time, the number the reference reports (Self-Forcing: 29.4 FPS on an H200, bf16, SDPA).
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass

import torch

from ..cache import KVCacheConfig
from ..errors import ConfigError
from ..models.wan.causal_transformer import CausalWanTransformer
from ..models.wan.config import WanConfig
from ..pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from ..tensors import prefer_expandable_segments
from ..vae.memory import DecodeSlicing
from ..vae.overlap import OverlappedDecoder, to_uint8_frames
from .benchmark_report import BlockTimer, effective_attention

log = logging.getLogger(__name__)

PRESETS = {
    # Wan 2.1 T2V 1.3B at 480x832: latents 60x104, 1560 tokens per frame
    "wan-1.3b": dict(config=WanConfig(), latent_height=60, latent_width=104),
    # Wan 2.1 14B (Krea Realtime's backbone) at 480x832
    "wan-14b": dict(
        config=WanConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40), latent_height=60, latent_width=104
    ),
    # Wan 2.1 T2V 14B at 480x832 sampled as Krea Realtime 14B (the released causal 14B; docs/models.md): 5 steps
    # (the last at t = 0) per 3-frame block and the KV cache rebuilt from 3 clean frames before every block.
    # bf16 weights alone are 28 GiB: an 80+ GiB GPU (H100/H200).
    "14b": dict(
        config=WanConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40),
        latent_height=60,
        latent_width=104,
        sampling=dict(denoising_steps=(1000, 750, 500, 250, 0), kv_recompute_frames=3),
    ),
    # Wan 2.2 TI2V-5B at 704x1280 (LongLive 2.0): 48 latent channels, 16x VAE → latents 44x80, 880 tokens per
    # frame; 8-frame blocks, 4 blocks (32 latent frames, 125 pixel frames) unless told otherwise
    "wan-5b": dict(
        config=WanConfig("ti2v", in_dim=48, out_dim=48, dim=3072, ffn_dim=14336, num_heads=24, num_layers=30),
        latent_height=44,
        latent_width=80,
        latent_frames=32,
        block_frames=8,
    ),
    # CPU smoke test: a few seconds on 2 cores
    "tiny": dict(
        config=WanConfig(dim=64, ffn_dim=128, freq_dim=32, text_dim=32, text_len=16, num_heads=4, num_layers=2),
        latent_height=8,
        latent_width=12,
    ),
    # CPU smoke test of the Wan 2.2 path (48 channels, the Wan 2.2 VAE architecture at a tiny width)
    "tiny-5b": dict(
        config=WanConfig(
            "ti2v",
            in_dim=48,
            out_dim=48,
            dim=64,
            ffn_dim=128,
            freq_dim=32,
            text_dim=32,
            text_len=16,
            num_heads=4,
            num_layers=2,
        ),
        latent_height=4,
        latent_width=6,
        latent_frames=4,
        block_frames=2,
    ),
}
FULL_SIZE_PRESETS = ("wan-1.3b", "wan-14b", "14b", "wan-5b")  # the others are CPU smoke tests with tiny decoders too


@dataclass
class BenchConfig:
    preset: str = "wan-1.3b"
    latent_frames: int = 21  # 81 pixel frames
    block_frames: int = 3
    steps: tuple[int, ...] = (1000, 750, 500, 250)
    dtype: str = "bf16"
    device: str = "cuda"
    warmup: int = 1
    repeats: int = 3
    window_frames: int = -1
    sink_frames: int = 0
    attention: str = "auto"  # as the loader: flash_attn_4 where the fa4 extra imports, else sdpa
    vae_decode: bool = False  # stream-decode every block with the real Wan VAE architecture (random weights)
    overlap_decode: bool = False  # decode block n on a side stream while block n+1 denoises
    fp8: bool = False  # transformer-block linears in e4m3 (inferix_core.models.fp8), the rest in `dtype`
    compile: bool = False  # torch.compile each transformer block (models.wan.compile_blocks); warm-up absorbs it
    compile_mode: str | None = None  # torch.compile mode, e.g. "reduce-overhead" (CUDA graphs per region)
    decoder: str = "wan"  # with vae_decode: "wan" (the Wan VAE architecture) or "taehv" (the tiny preview decoder)
    # Wan VAE decode options: None = what load_world_model gives on this device (CUDA: VAEDecodeOptions.fast(),
    # compiled with `compile`; CPU: the reference path), True = fast() uncompiled, False = the reference path
    vae_fast: bool | None = None
    fp8_weights: bool = False  # block linears stored in e4m3, dequantized per call (models.fp8.FP8WeightLinear)
    resident_blocks: int | None = None  # block swap: blocks kept on the GPU (None = all, or planned from gpu_memory_gb)
    gpu_memory_gb: float | None = None  # emulate a card of this size (per-process memory fraction); plans block swap
    cuda_graphs: bool = False  # capture whole transformer calls as CUDA graphs (models.wan.cuda_graphs)
    # the Wan 2.1 VAE's streamed decode without a card: None = what load_world_model gives on this device (CUDA:
    # "frame", CPU: "whole"), "whole" = whole blocks per decoder call, "release" = the previous decode state freed
    # entry by entry, "frame" = that and one latent frame per decoder call (the same frames, a smaller working set)
    vae_slicing: str | None = None
    # q/k RMSNorm + RoPE as one Triton kernel on CUDA (inferix_core.kernels.qk_norm_rope, the default), or False:
    # the modules as Inductor fuses them (the numbers before that kernel)
    fused_norm_rope: bool = True
    # the adaLN LayerNorm + modulation (and the residual add before norm2) as one Triton kernel on CUDA
    # (inferix_core.kernels.layer_norm_modulate, the default), or False: the modules as Inductor fuses them
    fused_norms: bool = True
    # the residual stream token-major (CausalWanTransformer.row_major_stream, the default), or False: as the
    # patch embedding leaves it, (B, D, L) transposed (the numbers before the fused norms)
    row_major_stream: bool = True

    @classmethod
    def for_preset(cls, preset: str, **overrides) -> BenchConfig:
        """The preset's own run length and block size (e.g. wan-5b: 32 latent frames in 8-frame blocks), then overrides."""
        p = PRESETS[preset]
        base = {k: p[k] for k in ("latent_frames", "block_frames") if k in p}
        return cls(preset=preset, **{**base, **{k: v for k, v in overrides.items() if v is not None}})


# Levers by name, for `inferix bench --variants` and bench/compare_reference.py: "compile+graphs" sets both parts.
VARIANT_PARTS: dict[str, dict] = {
    "eager": {},
    "cudnn": dict(attention="sdpa_cudnn"),
    "compile": dict(compile=True),
    "graphs": dict(cuda_graphs=True),  # whole transformer calls as CUDA graphs (models/wan/cuda_graphs.py)
    "reduceoverhead": dict(compile=True, compile_mode="reduce-overhead"),  # torch's per-region graphs (fails: docs)
    "fa4": dict(attention="flash_attn_4"),  # FlashAttention-4 where its measured table says it is faster
    "fp8": dict(fp8=True),
    "unfusedrope": dict(fused_norm_rope=False),  # q/k RMSNorm + RoPE as Inductor fuses the modules
    "unfusednorms": dict(fused_norms=False),  # the adaLN LayerNorm + modulation as Inductor fuses the modules
    "colstream": dict(row_major_stream=False),  # the residual stream left transposed, as before the fused norms
    # end to end, the Wan VAE: by default what load_world_model gives on CUDA (fast(), compiled with compile);
    # "vaefast" = fast() uncompiled, "vaeref" = the reference decode path (the numbers before issue #19)
    "vaefast": dict(vae_fast=True),
    "vaeref": dict(vae_fast=False),
    "taehv": dict(decoder="taehv"),  # end to end: the TAEHV preview decoder instead of the Wan VAE
    "vaewhole": dict(vae_slicing="whole"),  # end to end: whole blocks per decoder call (CUDA's default before)
    "vaerelease": dict(vae_slicing="release"),  # end to end: the previous decode state released entry by entry
    "vaeframe": dict(vae_slicing="frame"),  # that, and one latent frame per decoder call
}


DECODER_FIELDS = frozenset({"vae_fast", "decoder", "vae_slicing"})  # BenchConfig fields only the decode reads


def decoder_only(variant: str) -> bool:
    """Whether a "+"-joined variant has a part that changes only the decode (no diffusion time to measure)."""
    fields = [set(VARIANT_PARTS.get(part, {})) for part in variant.split("+")]
    return any(f and f <= DECODER_FIELDS for f in fields)  # "eager" sets nothing: not a decode lever


def variant_options(variant: str) -> dict:
    """BenchConfig overrides of a "+"-joined variant name, e.g. "compile+graphs"."""

    opts: dict = {}
    for part in variant.split("+"):
        if part not in VARIANT_PARTS:
            raise ConfigError(f"unknown variant part '{part}'; expected {', '.join(VARIANT_PARTS)} (joined with +)")
        opts.update(VARIANT_PARTS[part])
    return opts


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_engine(cfg: BenchConfig) -> tuple[BlockDiffusionPipeline, torch.Tensor]:
    """The protocol's random-weight model (seed 0) with cfg's levers, its pipeline, and a random prompt.

    Every GPU benchmark builds through here, so they all time the same weights and the same prompt
    embedding (drawn after the weights, from the same seed).
    """
    preset = PRESETS[cfg.preset]
    device, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    torch.manual_seed(0)
    with device:
        model = CausalWanTransformer(preset["config"]).to(dtype).eval().requires_grad_(False)
    if cfg.attention != "sdpa":  # "auto" resolves here as the loader resolves it
        from ..models.registry import set_attention_backend

        set_attention_backend(model, cfg.attention)
    model.row_major_stream = cfg.row_major_stream
    if not (cfg.fused_norm_rope and cfg.fused_norms):
        from ..models.wan.causal_transformer import AttentionBlock, SelfAttention

        for module in model.modules():
            if isinstance(module, SelfAttention):
                module.fused_norm_rope = cfg.fused_norm_rope
            if isinstance(module, AttentionBlock):
                module.fused_norms = cfg.fused_norms
    if cfg.fp8:  # before compiling, so the compiled graph holds the fp8 layers
        from ..models.fp8 import quantize_linears_fp8

        quantize_linears_fp8(model)
    elif cfg.fp8_weights:
        from ..models.fp8 import quantize_linears_fp8

        quantize_linears_fp8(model, weight_only=True)
    sampling, cache = bench_sampling(cfg), KVCacheConfig(window_frames=cfg.window_frames, sink_frames=cfg.sink_frames)
    resident = planned_resident_blocks(cfg, cache) if cfg.resident_blocks is None else cfg.resident_blocks
    if resident is not None and resident < preset["config"].num_layers:
        from ..models.block_swap import enable_block_swap

        enable_block_swap(model, resident, device)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # hand the swapped blocks' device copies back before a memory cap applies
    if cfg.compile:
        from ..models.wan.causal_transformer import compile_blocks

        compile_blocks(model, mode=cfg.compile_mode)
    if cfg.cuda_graphs:  # after compile: the graphs record the compiled blocks' kernels
        from ..models.wan.cuda_graphs import enable_cuda_graphs

        enable_cuda_graphs(model)
    mc = preset["config"]
    context = torch.randn(1, mc.text_len, mc.text_dim, device=device, dtype=dtype)
    return BlockDiffusionPipeline(model, sampling, cache), context


def bench_sampling(cfg: BenchConfig) -> SamplingConfig:
    """The protocol's sampling: the preset's own, else Self-Forcing's (the loader's default family) with cfg's steps."""
    preset = PRESETS[cfg.preset]
    return SamplingConfig(
        **{"denoising_steps": cfg.steps, "block_frames": cfg.block_frames, **preset.get("sampling", {})}
    )


def bench_vae_decode_options(cfg: BenchConfig):
    """What the benchmark's Wan VAE decodes with: by default exactly what `load_world_model` gives users."""
    from ..models.registry import loader_vae_decode_options
    from ..vae.config import VAEDecodeOptions

    if cfg.vae_fast is None:
        return loader_vae_decode_options(cfg.device, compile=cfg.compile)
    return VAEDecodeOptions.fast() if cfg.vae_fast else None


def bench_vae_memory(cfg: BenchConfig):
    """The memory model of the bench's decoder: the Wan 2.1 VAE counted (`vae.memory`) with the options the
    bench decodes with; None for the others (the planner's own estimate)."""
    if not cfg.vae_decode or cfg.decoder != "wan" or PRESETS[cfg.preset]["config"].in_dim == 48:
        return None
    from ..vae.cost import estimated_memory
    from ..vae.options import VAEDecodeOptions

    preset = PRESETS[cfg.preset]
    return estimated_memory(
        preset["latent_height"], preset["latent_width"], 1, DTYPES[cfg.dtype].itemsize,
        96 if cfg.preset in FULL_SIZE_PRESETS else 4, options=bench_vae_decode_options(cfg) or VAEDecodeOptions(),
        cuda=torch.device(cfg.device).type == "cuda", slicing=bench_decode_slicing(cfg),
    )  # fmt: skip


_NON_TORCH: dict[tuple[str, float], int] = {}


def bench_non_torch_bytes(cfg: BenchConfig) -> int:
    """The plan's CUDA context + library workspaces term for the emulated card (0 without one or on the CPU),
    measured once per process so every plan of the run uses the same number."""
    if cfg.gpu_memory_gb is None:
        return 0
    key = (str(cfg.device), cfg.gpu_memory_gb)
    if key not in _NON_TORCH:
        from ..cache.planner import planned_non_torch_bytes

        _NON_TORCH[key] = planned_non_torch_bytes(cfg.device, int(cfg.gpu_memory_gb * 2**30))
    return _NON_TORCH[key]


def bench_memory_plan(cfg: BenchConfig, cache: KVCacheConfig, resident_blocks: int | None, decode_slicing=None):
    """The memory planner's estimate for this benchmark's run (what `planned_gib` reports)."""
    from ..cache.planner import plan_for
    from ..memory import PlanInput

    preset = PRESETS[cfg.preset]
    given = PlanInput(
        preset["latent_height"], preset["latent_width"], cfg.block_frames, cfg.latent_frames,
        dtype=DTYPES[cfg.dtype], decode_overlaps=cfg.overlap_decode,
    )  # fmt: skip
    return plan_for(
        given, preset["config"], cache, vae_bytes=None if cfg.vae_decode else 0, resident_blocks=resident_blocks,
        fp8_block_weights=cfg.fp8 or cfg.fp8_weights, vae_memory=bench_vae_memory(cfg), decode_slicing=decode_slicing,
        non_torch_bytes=bench_non_torch_bytes(cfg),
    )  # fmt: skip


BENCH_DECODE_SLICINGS = {
    "whole": DecodeSlicing(),
    "release": DecodeSlicing(release_previous_state=True),
    "frame": DecodeSlicing(1, True),
}


def bench_decode_slicing(cfg: BenchConfig) -> DecodeSlicing | None:
    """The slicing a `vae_slicing` variant asks for (the Wan 2.1 VAE only; a card's plan chooses its own)."""
    if cfg.vae_slicing is None:
        return None
    if cfg.vae_slicing not in BENCH_DECODE_SLICINGS:
        raise ConfigError(
            f"unknown vae_slicing '{cfg.vae_slicing}'; expected one of {', '.join(BENCH_DECODE_SLICINGS)}"
        )
    if not cfg.vae_decode or cfg.decoder != "wan":
        raise ConfigError("vae_slicing needs the Wan VAE decode (vae_decode=True, decoder='wan')")
    return BENCH_DECODE_SLICINGS[cfg.vae_slicing]


def planned_decode_slicing(cfg: BenchConfig, cache: KVCacheConfig, resident_blocks: int | None):
    """With gpu_memory_gb and the Wan 2.1 VAE: the fastest decode slicing whose plan fits the card (the
    smallest when none does, as `plan_resident_blocks` chose); else None (the VAE's default)."""
    vae = bench_vae_memory(cfg)
    if cfg.gpu_memory_gb is None or vae is None:
        return None
    from ..cache.planner import allocator_headroom_bytes

    budget = int(cfg.gpu_memory_gb * 2**30)
    usable = budget - allocator_headroom_bytes(budget)  # as plan_resident_blocks chose with
    for slicing in vae.slicings:
        if bench_memory_plan(cfg, cache, resident_blocks, slicing).total_bytes <= usable:
            break
    return slicing


def planned_resident_blocks(cfg: BenchConfig, cache: KVCacheConfig) -> int | None:
    """With gpu_memory_gb: the most resident blocks whose planned total fits the card (None: no card)."""
    if cfg.gpu_memory_gb is None:
        return None
    from ..cache.planner import plan_resident_blocks

    preset = PRESETS[cfg.preset]
    resident, _ = plan_resident_blocks(
        preset["config"], int(cfg.gpu_memory_gb * 2**30), preset["latent_height"], preset["latent_width"], cache,
        dtype=DTYPES[cfg.dtype], block_frames=cfg.block_frames, max_frames=cfg.latent_frames,
        vae_bytes=None if cfg.vae_decode else 0, fp8_block_weights=cfg.fp8 or cfg.fp8_weights,
        vae_memory=bench_vae_memory(cfg), decode_overlaps=cfg.overlap_decode, non_torch_bytes=bench_non_torch_bytes(cfg),
    )  # fmt: skip
    return resident


def bench_decoder(cfg: BenchConfig, preset: dict, device: torch.device, dtype: torch.dtype):
    """The random-weight decoder a benchmark decodes with: `cfg.decoder` ("wan": the Wan 2.1 or, for 48
    latent channels, the Wan 2.2 VAE; "taehv": the preview decoder), full size for the full-size presets."""
    from ..models.registry import loader_vae_stream_slicing
    from ..vae import TAEHV, TAEHVConfig, Wan22VAE, Wan22VAEConfig, WanVAE, WanVAEConfig

    full = cfg.preset in FULL_SIZE_PRESETS
    wan22 = preset["config"].in_dim == Wan22VAEConfig().z_dim  # 48 latent channels: the Wan 2.2 VAE
    with device:
        if cfg.decoder == "taehv":
            latent = dict(latent_channels=48, patch_size=2) if wan22 else {}
            small = TAEHVConfig(decoder_channels=(16, 16, 8, 8), encoder_channels=8, **latent)
            return TAEHV(TAEHVConfig(**latent) if full else small).to(dtype).eval()
        if cfg.decoder != "wan":
            raise ValueError(f"unknown decoder '{cfg.decoder}'; expected 'wan' or 'taehv'")
        if wan22:
            vae = Wan22VAE(Wan22VAEConfig() if full else Wan22VAEConfig(dim=2, dec_dim=4)).to(dtype).eval()
        else:
            vae = WanVAE(WanVAEConfig(dim=96 if full else 4)).to(dtype).eval()
    vae.decode_options = bench_vae_decode_options(cfg)
    vae.stream_slicing = loader_vae_stream_slicing(vae, device)  # a variant's slicing replaces it later
    return vae


def run_engine_benchmark(cfg: BenchConfig) -> dict:
    """Build the preset with random weights, run warm-up + repeats, return medians and per-block times."""
    preset = PRESETS[cfg.preset]
    device, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    cuda = device.type == "cuda"
    if cfg.gpu_memory_gb is not None:  # as load_world_model does for a budget, before anything is allocated
        prefer_expandable_segments(device)
    pipe, context = build_engine(cfg)
    num_blocks = cfg.latent_frames // cfg.block_frames
    vae = bench_decoder(cfg, preset, device, dtype) if cfg.vae_decode else None

    swap = getattr(pipe.model, "block_swap", None)
    resident = swap.resident if swap is not None and swap.swapped else None
    asked = bench_decode_slicing(cfg)  # checked even where a card's plan below chooses instead
    slicing = planned_decode_slicing(cfg, pipe.cache_config, resident) or asked
    if slicing is not None:  # the Wan 2.1 VAE decodes as planned for the card (or as the variant asks)
        vae.stream_slicing = slicing
    plan = bench_memory_plan(cfg, pipe.cache_config, resident, slicing)
    planned = plan.torch_bytes  # the tensors: what the allocated peak is compared with
    if vae is not None and plan.decode is not None and bench_vae_memory(cfg) is not None:
        slicing = plan.decode.slicing
    if cfg.gpu_memory_gb is not None and cuda:  # the emulated card: the allocator refuses past this
        torch.cuda.empty_cache()
        total_memory = torch.cuda.get_device_properties(device).total_memory
        index = device.index if device.index is not None else torch.cuda.current_device()
        # the cap is on PyTorch's allocator; a real card also holds the context and workspaces (planned apart)
        tensors = cfg.gpu_memory_gb * 2**30 - plan.non_torch_bytes
        torch.cuda.set_per_process_memory_fraction(min(1.0, tensors / total_memory), index)
    runs = []
    for r in range(cfg.warmup + cfg.repeats):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        timer = BlockTimer(cuda)
        decoder = vae.stream_decoder() if vae is not None else None
        overlapped = OverlappedDecoder(decoder, device) if decoder is not None and cfg.overlap_decode else None
        # as generate_video runs a request that keeps no world state: the last block's K/V are never read
        req = GenerationRequest(
            num_blocks, preset["latent_height"], preset["latent_width"], context, seed=r, final_context_pass=False
        )
        t0 = time.perf_counter()
        first_frame = None
        for out in pipe.stream(req, timer):
            latents = out.latents.permute(0, 2, 1, 3, 4)
            if overlapped is not None:
                overlapped.submit(out.index, latents)
                overlapped.ready(wait=out.index == 0)  # the first block's frames as soon as possible
            elif decoder is not None and first_frame is None and latents.shape[2] > 1:
                # as decode_to_sinks does for users: the first latent frame on its own, then the rest
                to_uint8_frames(decoder.decode(latents[:, :, :1])).cpu()
                if cuda:
                    torch.cuda.synchronize()
                first_frame = time.perf_counter() - t0
                to_uint8_frames(decoder.decode(latents[:, :, 1:])).cpu()
            elif decoder is not None:
                to_uint8_frames(decoder.decode(latents)).cpu()
            if first_frame is None:
                if cuda:
                    torch.cuda.synchronize()
                first_frame = time.perf_counter() - t0
        if overlapped is not None:
            overlapped.flush()
        if cuda:
            torch.cuda.synchronize()
        total = time.perf_counter() - t0
        blocks = timer.seconds()
        if r >= cfg.warmup:
            runs.append(
                {
                    "total_s": total,
                    "block_s": blocks,
                    "first_block_s": first_frame,
                    "peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                    # reserved too: a CUDA graph's intermediates stay reserved in its pool but are not "allocated"
                    "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
                }
            )
    pixel_frames = 1 + 4 * (cfg.latent_frames - 1)
    runner = getattr(pipe.model, "cuda_graphs", None)  # None: off, or refused (the log says why)
    graphs = None if runner is None else {**asdict(runner.stats), "graphs": runner.num_graphs}
    total_med = statistics.median(r["total_s"] for r in runs)
    per_block = [statistics.median(r["block_s"][i] for r in runs) for i in range(num_blocks)]
    return {
        "config": {
            **asdict(cfg),
            "steps": list(pipe.sampling.denoising_steps),
            "kv_recompute_frames": pipe.sampling.kv_recompute_frames,
            "preset_layers": preset["config"].num_layers,
        },
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "pixel_frames": pixel_frames,
        "median_total_s": total_med,
        "fps": pixel_frames / total_med,
        "median_first_block_s": statistics.median(r["first_block_s"] for r in runs),
        "median_block_s": per_block,
        "peak_gib": max(r["peak_bytes"] for r in runs) / 2**30 if cuda else None,
        "peak_reserved_gib": max(r["peak_reserved_bytes"] for r in runs) / 2**30 if cuda else None,
        "planned_gib": planned / 2**30,
        "planned_non_torch_gib": plan.non_torch_bytes / 2**30,
        # after the run: the CUDA context, cuBLAS/cuDNN workspaces (and any other process on the device)
        "measured_non_torch_gib": _measured_non_torch(device) / 2**30 if cuda else None,
        "decode_slicing": None if slicing is None else slicing.describe(cfg.block_frames),
        "resident_blocks": resident,
        "cuda_graphs": graphs,
        "attention_effective": effective_attention(cfg.attention),
        "vae_options": repr(getattr(vae, "decode_options", None)) if vae is not None else None,
        "runs": runs,
    }


def _measured_non_torch(device: torch.device) -> int:
    from ..cache.planner import measured_non_torch_bytes

    return measured_non_torch_bytes(device)
