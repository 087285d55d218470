"""Memory planner: from model, resolution, window, batch and a GPU budget to a cache configuration.

`plan_memory` adds up the GPU bytes of the transformer weights, the KV cache, the VAE's weights and
decode state (kept for the run) and the larger of one block call's activations and one block decode's
transient; with a budget it picks the fastest exact VAE decode slicing that fits, then keeps the
requested cache configuration if it fits or picks the first feasible alternative (offload, then int8,
then int4 pages, then a shorter window: exactness first). It allocates nothing. KV cache bytes are exact
(the formulas the stores allocate with), the Wan VAE's are counted (vae/memory.py), activations are an
estimate that errs high (docs/memory.md, "How the planner adds up").
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import CacheBudgetError, ConfigError
from ..vae.memory import DecodeMemory, DecodeSlicing, VAEMemory
from .factory import cache_kind
from .offload import offload_layout
from .paged import planned_pages
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)

GiB = 1024**3
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _elem(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _format_bytes(n: float) -> str:
    if n >= GiB / 10 or n == 0:
        return f"{n / GiB:.1f} GiB"
    return f"{n / 1024**2:.1f} MiB"  # small models and caches would all read "0.0 GiB"


@dataclass
class CacheCost:
    """GPU and host bytes of one cache configuration, and how the GPU bytes were counted."""

    kind: str
    device_bytes: int
    host_bytes: int
    formula: str


def cache_cost(config: KVCacheConfig, spec: KVCacheSpec) -> CacheCost:
    """Bytes the cache of `config` allocates for `spec`: layers × frame slots × each kind's page size
    (KVCacheSpec.page_size_bytes, the formula the stores allocate with)."""
    s = spec
    kind = cache_kind(config, spec)
    if config.is_global and not s.max_frames:
        raise ConfigError("planning a global-attention cache (window_frames=-1) needs the run length (max_frames)")
    shape = (
        f"{s.frame_tokens} tokens × {s.num_heads} heads × {s.head_dim}, K and V, {_DTYPE_NAMES.get(s.dtype, s.dtype)}"
    )
    frame = s.page_size_bytes()  # K and V of one full-precision frame of one layer
    if kind == "ring":
        frames = s.max_frames if config.is_global else config.window_frames
        return CacheCost(kind, s.num_layers * frames * frame, 0, f"{s.num_layers} layers × {frames} frames × {shape}")
    slots = planned_pages(config, spec) * (config.page_frames or s.block_frames)
    if kind == "paged":
        return CacheCost(
            kind, s.num_layers * slots * frame, 0, f"{s.num_layers} layers × {slots} frame slots × {shape}"
        )
    if kind == "offload":
        lay = offload_layout(config, spec)
        return CacheCost(
            kind,
            lay.device_bytes,
            lay.host_bytes,
            f"({len(lay.resident)} resident + {lay.num_staging} staging) layers × {slots} frame slots + "
            f"{lay.num_offloaded} block buffers × {s.block_frames} frames, × {shape}; "
            f"{lay.num_offloaded} layers in pinned host memory",
        )
    fp_frames = (0 if config.is_global else config.sink_frames) + config.residual_frames
    return CacheCost(
        kind,
        s.num_layers * (slots * s.page_size_bytes(config.quantization) + fp_frames * frame),
        0,
        f"{s.num_layers} layers × ({slots} {config.quantization} frame slots + {fp_frames} "
        f"full-precision frames) × {s.frame_tokens} tokens × {s.num_heads} heads × {s.head_dim}",
    )


# Offload: what a call has to move and how long its compute lasts (docs/kv_cache.md, "Offload: bytes and time")
H2D_BYTES_PER_S = 50e9  # pinned host → H200 (bench/bench_kv_cache.py measures the machine's own)
ACHIEVED_FLOPS = 450e12  # bf16, Wan 1.3B on an H200: 1.35 TFLOP per layer-call at 480×832 in ≈ 3.0 ms
TRANSFER_SHARE = 0.75  # the planner lets a call's copies fill at most this share of its compute time


@dataclass
class OffloadEstimate:
    """Per call, per offloaded layer: bytes to stream vs the layer's compute time (steady state, full window).

    Every call streams each offloaded layer's past window (window − block frames) once; the block itself
    stays on the GPU and goes back once per block. Copies on the side stream hide behind the whole call's
    compute, so with m offloaded of L layers the hidden share is at best min(1, L·t_layer / (m·t_h2d)).
    """

    num_layers: int
    num_offloaded: int
    past_frames: int
    bytes_per_layer_call: int  # h2d, K and V of the past window of one layer
    writeback_bytes_per_layer_block: int  # d2h, K and V of one block of one layer
    h2d_seconds_per_layer_call: float
    layer_seconds: float  # compute of one layer in one call (FLOPs / ACHIEVED_FLOPS)
    flops_per_layer_call: float
    max_hidden_offloaded: int  # most offloaded layers whose copies fit TRANSFER_SHARE of a call's compute

    @property
    def best_hidden_fraction(self) -> float:
        """Upper bound of the hidden share of the h2d time with `num_offloaded` layers (perfect overlap)."""
        if self.num_offloaded == 0:
            return 1.0
        return min(1.0, self.num_layers * self.layer_seconds / (self.num_offloaded * self.h2d_seconds_per_layer_call))

    @property
    def min_resident_layers(self) -> int:
        return self.num_layers - self.max_hidden_offloaded

    def describe(self) -> str:
        return (
            f"offload: {self.num_offloaded} of {self.num_layers} layers stream {self.bytes_per_layer_call / 1e6:.1f} MB "
            f"each per call ({self.past_frames} past frames, {1e3 * self.h2d_seconds_per_layer_call:.2f} ms at "
            f"{H2D_BYTES_PER_S / 1e9:.0f} GB/s) vs ≈ {1e3 * self.layer_seconds:.2f} ms compute per layer; at best "
            f"{100 * self.best_hidden_fraction:.0f} % hidden. Keeping ≥ {self.min_resident_layers} layers resident "
            f"(≤ {self.max_hidden_offloaded} offloaded) keeps the copies within {100 * TRANSFER_SHARE:.0f} % of compute."
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(best_hidden_fraction=self.best_hidden_fraction, min_resident_layers=self.min_resident_layers)
        return d


def estimate_offload(
    model_config,
    spec: KVCacheSpec,
    config: KVCacheConfig,
    num_offloaded: int | None = None,
    h2d_bytes_per_s: float = H2D_BYTES_PER_S,
    flops_per_s: float = ACHIEVED_FLOPS,
) -> OffloadEstimate:
    """Bytes and seconds of one offloaded layer per call, and how many offloaded layers can hide.

    FLOPs of one layer-call with n = B·block·T query tokens over a span of S = B·window·T keys, d = dim:
    projections and FFN 2·n·(6·d² + 2·d·ffn) (self q, k, v, o; cross q, o; the prompt's K/V are cached),
    self-attention 4·n·S·d/B, cross-attention 4·n·text_len·d. Wan 1.3B, 480×832 (T = 1560, window 21):
    0.39 + 0.94 + 0.01 = 1.35 TFLOP ≈ 3.0 ms at 450 TFLOP/s, vs 18 past frames × 9.58 MB = 172.5 MB
    ≈ 3.45 ms at 50 GB/s.
    """
    cfg, s = model_config, spec
    frame = s.page_size_bytes()  # K and V of one frame of one layer
    window = (s.max_frames or 8 * s.block_frames) if config.is_global else config.window_frames
    past = window - s.block_frames
    n = s.batch_size * s.block_frames * s.frame_tokens
    d, span = cfg.dim, window * s.frame_tokens
    flops = 2 * n * (6 * d * d + 2 * d * cfg.ffn_dim) + 4 * n * span * d + 4 * n * cfg.text_len * d
    t_layer = flops / flops_per_s
    t_h2d = past * frame / h2d_bytes_per_s
    m_max = s.num_layers if t_h2d <= 0 else min(s.num_layers, int(TRANSFER_SHARE * s.num_layers * t_layer / t_h2d))
    if num_offloaded is None:
        num_offloaded = offload_layout(config, spec).num_offloaded
    return OffloadEstimate(
        s.num_layers, num_offloaded, past, past * frame, s.block_frames * frame, t_h2d, t_layer, flops, m_max
    )


@dataclass
class MemoryPlan:
    """What a run needs on the GPU, and the cache configuration that fits (or why none does).

    Peak = what stays for the whole run (transformer weights, KV cache, the VAE's weights and its decode
    state) + the larger of one block call's activations and one block decode's transient (they never
    live at once unless the decode overlaps the next block: `decode_overlaps`, then their sum).
    """

    budget_bytes: int | None
    weights_bytes: int
    activation_bytes: int
    vae_bytes: int  # the VAE's weights + decode working set (state + transient), as one number
    requested: KVCacheConfig
    requested_cache: CacheCost
    chosen: KVCacheConfig | None
    chosen_cache: CacheCost | None
    message: str  # empty when the request fits as is
    candidates: list[tuple[str, int, bool]] = field(default_factory=list)  # (label, device bytes, fits)
    offload: OffloadEstimate | None = None  # when the planned cache offloads: its per-call copy arithmetic
    budget_source: str = "explicit"  # or where a default budget came from ("free memory of cuda:0", ...)
    host: HostMemory | None = None  # frames kept in host memory vs the RAM available (set by `check_host_memory`)
    vae_weights_bytes: int = 0
    decode: DecodeMemory | None = None  # the Wan 2.1 VAE decode as planned: state, transient, the slicing chosen
    block_frames: int = 3
    decode_overlaps: bool = False
    non_torch_bytes: int = 0  # CUDA context + cuBLAS/cuDNN workspaces: on the card, outside PyTorch's allocator
    device_type: str = "cuda"  # where the run's tensors live ("cpu": the totals are host memory)

    @property
    def feasible(self) -> bool:
        return self.chosen is not None

    @property
    def vae_kept_bytes(self) -> int:
        """VAE bytes held for the whole run: its weights and the decode state carried between blocks."""
        return self.vae_bytes - (self.decode.transient_bytes if self.decode is not None else 0)

    @property
    def transient_bytes(self) -> int:
        """The larger of one block call's activations and one block decode's transient (their sum when overlapped)."""
        decode = self.decode.transient_bytes if self.decode is not None else 0
        return self.activation_bytes + decode if self.decode_overlaps else max(self.activation_bytes, decode)

    @property
    def fixed_bytes(self) -> int:
        """Everything but the KV cache (the non-PyTorch memory included)."""
        return self.weights_bytes + self.vae_kept_bytes + self.transient_bytes + self.non_torch_bytes

    @property
    def total_bytes(self) -> int:
        """What the card must hold: PyTorch's tensors and the non-PyTorch memory."""
        return self.fixed_bytes + (self.chosen_cache or self.requested_cache).device_bytes

    @property
    def torch_bytes(self) -> int:
        """The tensors alone: what `torch.cuda.max_memory_allocated` is compared with."""
        return self.total_bytes - self.non_torch_bytes

    def check(self) -> KVCacheConfig:
        """The configuration to run with; raises CacheBudgetError when nothing fits (device or host memory)."""
        if self.chosen is None:
            raise CacheBudgetError(self.message)
        if self.host is not None and not self.host.fits:
            raise CacheBudgetError(self.host.message)
        return self.chosen

    def describe(self) -> str:
        rows = [
            ("transformer weights", self.weights_bytes),
            ("activations (one block call, est.)", self.activation_bytes),
        ]
        if self.decode is not None and self.decode.transient_bytes:
            rows += [
                ("VAE weights + decode state (kept)", self.vae_kept_bytes),
                ("VAE block decode (transient)", self.decode.transient_bytes),
            ]
        else:
            rows.append(("VAE (streaming decode)", self.vae_bytes))
        rows.append((f"KV cache as requested ({self.requested_cache.kind})", self.requested_cache.device_bytes))
        if self.chosen_cache is not None and self.chosen != self.requested:
            rows.append((f"KV cache as planned ({self.chosen_cache.kind})", self.chosen_cache.device_bytes))
        if self.non_torch_bytes:
            rows.append(("CUDA context + library workspaces", self.non_torch_bytes))
        lines = ["Memory plan"] + [f"  {name:<40} {_format_bytes(n):>10}" for name, n in rows]
        overlap = (
            "activations + decode (overlapped)" if self.decode_overlaps else "the larger of activations and decode"
        )
        where = "total on the GPU" if self.device_type == "cuda" else f"total in {self.device_type.upper()} memory"
        lines.append(f"  {where:<40} {_format_bytes(self.total_bytes):>10}  ({overlap} counted)")
        budget = _format_bytes(self.budget_bytes) if self.budget_bytes else "none"
        source = f" ({self.budget_source})" if self.budget_bytes and self.budget_source != "explicit" else ""
        lines.append(f"  {'budget':<40} {budget:>10}{source}")
        lines.append(f"  cache: {(self.chosen_cache or self.requested_cache).formula}")
        if self.decode is not None and self.decode.transient_bytes:
            lines.append(f"  VAE decode: {self.decode.slicing.describe(self.block_frames)}; {self.decode.formula}")
        host = (self.chosen_cache or self.requested_cache).host_bytes
        if host:
            lines.append(f"  pinned host memory for offloaded pages: {_format_bytes(host)}")
        if self.offload is not None:
            lines.append(f"  {self.offload.describe()}")
        if self.host is not None:
            lines.append(f"  {self.host.describe()}")
        if self.message:
            lines.append(f"  {self.message}")
        if self.host is not None and not self.host.fits:
            lines.append(f"  {self.host.message}")
        if self.chosen is not None and self.chosen != self.requested:
            c = self.chosen
            lines.append(
                f"  planned: window_frames={c.window_frames}, sink_frames={c.sink_frames}, offload={c.offload!r}, "
                f"quantization={c.quantization!r}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def cfg(c: KVCacheConfig | None) -> dict | None:
            return None if c is None else dataclasses.asdict(c)

        return {
            "budget_bytes": self.budget_bytes,
            "weights_bytes": self.weights_bytes,
            "activation_bytes": self.activation_bytes,
            "vae_bytes": self.vae_bytes,
            "vae_kept_bytes": self.vae_kept_bytes,
            "decode": None if self.decode is None else dataclasses.asdict(self.decode),
            "decode_slicing": None if self.decode is None else self.decode.slicing.describe(self.block_frames),
            "decode_overlaps": self.decode_overlaps,
            "requested": cfg(self.requested),
            "requested_cache": dataclasses.asdict(self.requested_cache),
            "chosen": cfg(self.chosen),
            "chosen_cache": None if self.chosen_cache is None else dataclasses.asdict(self.chosen_cache),
            "total_bytes": self.total_bytes,
            "feasible": self.feasible,
            "message": self.message,
            "candidates": [list(c) for c in self.candidates],
            "offload": None if self.offload is None else self.offload.to_dict(),
            "budget_source": self.budget_source,
            "host": None if self.host is None else dataclasses.asdict(self.host),
            "non_torch_bytes": self.non_torch_bytes,
            "torch_bytes": self.torch_bytes,
        }


def plan_memory(
    model_config,
    latent_h: int,
    latent_w: int,
    cache_config: KVCacheConfig,
    batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    budget_bytes: int | None = None,
    vae_dim: int = 96,
    block_frames: int = 3,
    max_frames: int | None = None,
    vae_bytes: int | None = None,
    resident_blocks: int | None = None,
    fp8_block_weights: bool = False,
    vae_memory: VAEMemory | None = None,
    decode_slicing: DecodeSlicing | None = None,
    decode_overlaps: bool = False,
    non_torch_bytes: int = 0,
) -> MemoryPlan:
    """Plan GPU memory for a run; see the module docstring.

    Args:
        model_config: WanConfig (num_layers, num_heads, head_dim, dim, ffn_dim, patch_size, parameters).
        latent_h, latent_w: latent size (pixels / 8 for Wan 2.1, / 16 for Wan 2.2); 60 × 104 for 480 × 832,
            44 × 80 for 704 × 1280 (TI2V-5B).
        cache_config: the requested cache settings.
        budget_bytes: GPU bytes the run may use; None = unlimited (the plan only reports).
        vae_dim: base channel count of the Wan 2.1 VAE decoder (96), for its estimate when no VAE is given.
        max_frames: run length in latent frames, needed for global attention (window_frames=-1).
        vae_bytes: the decoder's weights + working set as one number, kept for the whole run (a decoder the
            Wan 2.1 formula does not describe); 0 = no decoding.
        resident_blocks: with block swap (`models.block_swap`), the transformer blocks kept on the device;
            the others count only as the two staging slots. None = every block resident.
        fp8_block_weights: the block linears' weights stored in e4m3 (`fp8_weights` / `fp8`).
        vae_memory: the Wan 2.1 VAE's memory model (`vae.memory.VAEMemory.for_vae`); None (and no
            `vae_bytes`) = the Wan VAE of `vae_dim` with its CUDA defaults (48 latent channels: Wan 2.2's).
        decode_slicing: how blocks are decoded; None = with a budget, the fastest slicing that leaves the
            requested cache room (`vae.memory.DECODE_SLICINGS`), else the VAE's own.
        decode_overlaps: the decode runs beside the next block's denoising (`OverlappedDecoder`).
        non_torch_bytes: device memory outside PyTorch's allocator that the budget must also hold (the CUDA
            context, cuBLAS/cuDNN workspaces; `planned_non_torch_bytes()`); 0 on the CPU.
    """
    cfg = model_config
    elem = _elem(dtype)
    spec = _kv_spec(cfg, latent_h, latent_w, block_frames, batch, dtype, max_frames)
    cache_config.check_block(block_frames)
    weights = transformer_weight_bytes(cfg, elem, resident_blocks, fp8_block_weights)
    acts = activation_bytes(cfg, spec, cache_config)
    vae = _vae_memory(cfg.in_dim, latent_h, latent_w, batch, elem, vae_dim, vae_bytes, vae_memory)
    requested_cost = cache_cost(cache_config, spec)
    plan = MemoryPlan(
        budget_bytes, weights, acts, 0, cache_config, requested_cost, cache_config, requested_cost, "",
        vae_weights_bytes=vae.weights_bytes, block_frames=block_frames, decode_overlaps=decode_overlaps,
        non_torch_bytes=non_torch_bytes,
    )  # fmt: skip
    if vae.fixed_bytes is not None:  # a decoder of its own estimate: kept for the whole run, nothing to choose
        plan.vae_bytes = vae.fixed_bytes
    else:
        _set_decode(plan, _choose_decode(plan, vae, decode_slicing))
    if budget_bytes is None or plan.total_bytes <= budget_bytes:
        if requested_cost.kind == "offload":
            plan.offload = estimate_offload(cfg, spec, cache_config)
        return plan
    avail = budget_bytes - plan.fixed_bytes
    window = _largest_window(dataclasses.replace(cache_config, offload="off", gpu_budget_bytes=None), spec, avail)
    _choose_cache(plan, _cache_alternatives(cache_config, spec, avail, window), spec, avail)
    if plan.chosen_cache is not None and plan.chosen_cache.kind == "offload":
        plan.offload = estimate_offload(cfg, spec, plan.chosen)
    plan.message = _budget_message(plan, avail, window) + _offload_warning(plan.offload)
    log.info("%s", plan.message)
    return plan


def _kv_spec(cfg, latent_h, latent_w, block_frames, batch, dtype, max_frames) -> KVCacheSpec:
    """The KV cache's shape for this run (no tensors: device "meta")."""
    ft = cfg.frame_tokens(latent_h, latent_w)
    return KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, ft, block_frames, batch, dtype, "meta", max_frames)


def activation_bytes(cfg, spec: KVCacheSpec, cache_config: KVCacheConfig) -> int:
    """One block call's activations (estimate; memory-efficient SDPA, so no score matrix): n query tokens
    against a span of keys. `elem·(8·n·dim + 2·n·ffn + 2·span·dim) + 16·n·dim` (float32 RoPE), plus
    float32 dequantization temporaries of the span for a quantized cache."""
    elem = _elem(spec.dtype)
    n = spec.batch_size * spec.block_frames * spec.frame_tokens
    span_frames = spec.max_frames if cache_config.is_global else cache_config.window_frames
    span = spec.batch_size * (span_frames or spec.block_frames) * spec.frame_tokens
    acts = elem * (8 * n * cfg.dim + 2 * n * cfg.ffn_dim + 2 * span * cfg.dim) + 8 * 2 * n * cfg.dim  # + RoPE f32
    if cache_config.quantization != "none":
        acts += 4 * 2 * span * cfg.dim  # float32 dequantization temporaries
    return acts


def _vae_memory(latent_channels, latent_h, latent_w, batch, elem, vae_dim, vae_bytes, vae_memory) -> VAEMemory:
    """The decoder's memory model: given, a fixed number, or the Wan 2.1 / 2.2 VAE by the latent channels."""
    if vae_memory is not None:
        return vae_memory
    if vae_bytes is not None:
        return VAEMemory.fixed(vae_bytes)
    if latent_channels == 48:  # the Wan 2.2 VAE: its own estimate (vae.config)
        from ..vae.config import estimated_vae_bytes

        return VAEMemory.fixed(estimated_vae_bytes(48, latent_h, latent_w, 1, batch, elem))
    return VAEMemory.estimated(latent_h, latent_w, batch, elem, vae_dim)


def _choose_decode(plan: MemoryPlan, vae: VAEMemory, slicing: DecodeSlicing | None) -> DecodeMemory:
    """The decode as asked; else, with a budget, the fastest slicing whose total leaves room for the
    requested cache (the smallest when none does); else the VAE's own."""
    if slicing is not None or plan.budget_bytes is None:
        return vae.decode(plan.block_frames, slicing)
    decode = None
    for candidate in vae.slicings:
        decode = vae.decode(plan.block_frames, candidate)
        _set_decode(plan, decode, vae.weights_bytes)
        if plan.total_bytes <= plan.budget_bytes:
            break
    assert decode is not None
    if decode.slicing != vae.default:
        log.info("memory plan: the VAE decodes %s", decode.slicing.describe(plan.block_frames))
    return decode


def _set_decode(plan: MemoryPlan, decode: DecodeMemory, weights: int | None = None) -> None:
    plan.decode = decode
    plan.vae_bytes = (plan.vae_weights_bytes if weights is None else weights) + decode.working_set_bytes


def _cache_alternatives(
    config: KVCacheConfig, spec: KVCacheSpec, avail: int, window: int | None
) -> list[tuple[str, KVCacheConfig]]:
    """Cache configurations to try when the request does not fit, exactness first: offload keeps results
    bitwise, quantization changes them a little, a shorter window changes what the model sees."""
    options: list[tuple[str, KVCacheConfig]] = []
    if avail > 0:
        options.append(
            ("offload", dataclasses.replace(config, offload="auto", gpu_budget_bytes=avail, quantization="none"))
        )
    base = dataclasses.replace(config, offload="off", gpu_budget_bytes=None)
    options += [
        ("int8", dataclasses.replace(base, quantization="int8")),
        ("int4", dataclasses.replace(base, quantization="int4")),
    ]
    if window is not None:
        options.append((f"window_frames={window}", dataclasses.replace(base, window_frames=window)))
    return options


def _choose_cache(plan: MemoryPlan, options: list[tuple[str, KVCacheConfig]], spec: KVCacheSpec, avail: int) -> None:
    """The first alternative whose cache fits `avail` becomes the plan's; every one is listed as a candidate."""
    plan.chosen, plan.chosen_cache = None, None
    for label, option in options:
        try:
            cost = cache_cost(option, spec)
        except CacheBudgetError:  # offload cannot even fit its two staging layers
            plan.candidates.append((label, -1, False))
            continue
        fits = cost.device_bytes <= avail
        plan.candidates.append((label, cost.device_bytes, fits))
        if fits and plan.chosen is None:
            plan.chosen, plan.chosen_cache = option, cost


def _budget_message(plan: MemoryPlan, avail: int, window: int | None) -> str:
    """Why the requested cache does not fit, the fixes, and (when nothing fits) what each alternative needs."""
    req = plan.requested_cache
    hints = []
    if window is not None and window != plan.requested.window_frames:
        hints.append(f"lower window_frames to {window}")
    hints += ["set quantization='int8'", "or enable offload"]
    left = f"{_format_bytes(avail)}" if avail > 0 else f"nothing ({_format_bytes(-avail)} short before the cache)"
    message = (
        f"KV cache needs {_format_bytes(req.device_bytes)} ({req.formula}) but the budget of "
        f"{_format_bytes(plan.budget_bytes)} leaves {left} for it (weights {_format_bytes(plan.weights_bytes)}, "
        f"activations {_format_bytes(plan.activation_bytes)}, VAE {_format_bytes(plan.vae_bytes)}). "
        f"{', '.join(hints).capitalize()}."
    )
    if plan.chosen is None:
        message += (
            " None of these fits: "
            + "; ".join(
                f"{lab} needs {_format_bytes(b)}" if b >= 0 else f"{lab} cannot fit its staging buffers"
                for lab, b, _ in plan.candidates
            )
            + "."
        )
    return message


def _offload_warning(est: OffloadEstimate | None) -> str:
    """A note when more layers are offloaded than their copies can hide behind a call's compute."""
    if est is None or est.num_offloaded <= est.max_hidden_offloaded:
        return ""
    share = est.num_offloaded * est.h2d_seconds_per_layer_call / (est.num_layers * est.layer_seconds)
    return (
        f" Offload streams {est.num_offloaded} layers per call (copies ≈ {100 * share:.0f} % of the "
        f"compute time, est.; ≤ {est.max_hidden_offloaded} layers keep them within "
        f"{100 * TRANSFER_SHARE:.0f} %): expect part of the transfer time to show."
    )


def _largest_window(config: KVCacheConfig, spec: KVCacheSpec, avail: int) -> int | None:
    """Largest resident window (≥ sink + block) whose cache fits `avail` bytes, or None."""
    top = spec.max_frames if config.is_global else config.window_frames
    lowest = config.sink_frames + spec.block_frames
    for w in range((top or lowest) - 1, lowest - 1, -1):
        if cache_cost(dataclasses.replace(config, window_frames=w), spec).device_bytes <= avail:
            return w
    return None


# --- N futures of one stream (branching) -------------------------------------------------------------


def fork_pages(config: KVCacheConfig, spec: KVCacheSpec, past_frames: int, future_frames: int) -> tuple[int, int]:
    """(pages the common past maps, most pages one future adds) for futures forked at `past_frames`.

    A future maps the past's pages (no copy) and allocates the pages its frames [past, past + future) write:
    the page the fork point falls inside is copied first (copy-on-write), the others are new. In a window a
    future never holds more live pages than the window needs (`planned_pages`), since its evicted own pages
    go back to the pool; the past's stay mapped while the parent lives. Exact for a global cache.
    """
    P = config.page_frames or spec.block_frames
    window = planned_pages(config, spec)
    shared = -(-past_frames // P)
    touched = len({f // P for f in range(past_frames, past_frames + future_frames)})
    if config.is_global:
        return shared, touched
    return min(shared, window), min(touched, window)


@dataclass
class ForkPlan:
    """What N futures forked from one stream need on the device, and the most futures that fit the budget.

    KV: the shared past's pages once + N × one future's own pages (`fork_pages`), at `page_bytes` each (all
    layers); working sets: the weights once, one batched block call of N streams' activations and N decoders.
    """

    num_futures: int
    shared_pages: int
    own_pages: int  # per future
    page_bytes: int
    weights_bytes: int
    activation_bytes: int  # one block call of the N futures batched
    decoder_bytes: int  # N decoders
    budget_bytes: int | None
    max_futures: int | None  # the most futures that fit the budget (None without a budget)
    message: str = ""

    @property
    def num_pages(self) -> int:
        return self.shared_pages + self.num_futures * self.own_pages

    @property
    def kv_bytes(self) -> int:
        return self.num_pages * self.page_bytes

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activation_bytes + self.decoder_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.total_bytes <= self.budget_bytes

    def check(self) -> ForkPlan:
        if not self.fits:
            raise CacheBudgetError(self.message)
        return self


def plan_forks(
    model_config,
    latent_h: int,
    latent_w: int,
    cache_config: KVCacheConfig,
    *,
    num_futures: int,
    past_frames: int,
    future_frames: int,
    dtype: torch.dtype = torch.bfloat16,
    block_frames: int = 3,
    budget_bytes: int | None = None,
    decoder_bytes: int = 0,
    shared_pages: int | None = None,
    resident_blocks: int | None = None,
) -> ForkPlan:
    """Plan `num_futures` futures of `future_frames` latent frames each, forked at `past_frames` (batched).

    Counts the shared past once and each future's new pages, activations of one block call of all futures
    as one batch, and `decoder_bytes` per future; allocates nothing. `shared_pages` is the parent's mapped
    page count when known (`len(stream.table)`). Over the budget, the message names the largest number of
    futures that fits (the cheapest fix) or, when not even one does, what one needs.
    """
    if num_futures < 1:
        raise ConfigError(f"plan at least one future, got {num_futures}")
    elem = _elem(dtype)
    total_frames = past_frames + future_frames
    one = _kv_spec(model_config, latent_h, latent_w, block_frames, 1, dtype, total_frames)
    shared, own = fork_pages(cache_config, one, past_frames, future_frames)
    if shared_pages is not None:
        shared = shared_pages
    page = one.num_layers * one.page_size_bytes(page_frames=cache_config.page_frames or block_frames)
    weights = transformer_weight_bytes(model_config, elem, resident_blocks)

    def plan(n: int) -> ForkPlan:
        spec = dataclasses.replace(one, batch_size=n)
        acts = activation_bytes(model_config, spec, cache_config)
        return ForkPlan(n, shared, own, page, weights, acts, n * decoder_bytes, budget_bytes, None)

    out = plan(num_futures)
    if budget_bytes is None:
        return out
    fitting = [n for n in range(num_futures, 0, -1) if plan(n).fits]
    out.max_futures = fitting[0] if fitting else 0
    if not out.fits:
        need = (
            f"{num_futures} futures need {_format_bytes(out.total_bytes)} (KV {out.num_pages} pages: {shared} shared + "
        )
        need += f"{num_futures} × {own} own; activations {_format_bytes(out.activation_bytes)}, decoders "
        need += f"{_format_bytes(out.decoder_bytes)}, weights {_format_bytes(weights)}) but the budget is "
        need += f"{_format_bytes(budget_bytes)}"
        if out.max_futures:
            out.message = f"{need}; at most {out.max_futures} futures fit: ask for {out.max_futures} or fewer"
        else:
            out.message = (
                f"{need}; not even one future fits ({_format_bytes(plan(1).total_bytes)}): fewer future blocks, a "
                "shorter window or a smaller size"
            )
    return out


ALLOCATOR_HEADROOM_FRACTION = 0.04  # of the budget, at most ALLOCATOR_HEADROOM_MAX_BYTES
ALLOCATOR_HEADROOM_MAX_BYTES = 512 * 2**20


def allocator_headroom_bytes(budget_bytes: int) -> int:
    """What a block-swap plan leaves unplanned: the caching allocator's fragmentation and library workspaces.

    Measured on the H200 (docs/performance.md): a 1.3B + Wan VAE run planned at 7.93 GiB under an 8 GiB cap
    ran out with 7.80 GiB allocated, 0.17 GiB reserved but unallocated, asking for 0.14 GiB more; the
    resident run peaked 0.17 GiB above its plan. 4 % of the budget (at most 0.5 GiB) covers both.
    """
    return min(int(budget_bytes * ALLOCATOR_HEADROOM_FRACTION), ALLOCATOR_HEADROOM_MAX_BYTES)


NON_TORCH_DEFAULT_BYTES = 768 * 2**20
"""Device memory outside PyTorch's allocator on a card the user names by its size (`gpu_memory`): the CUDA
context with the kernels loaded, cuBLAS's and cuDNN's workspaces. The H200 showed 0.73 GiB of it in the
1.3B + Wan VAE run's out-of-memory report (docs/performance.md); 0.75 GiB is that, rounded up."""


def measured_non_torch_bytes(device: torch.device | str) -> int:
    """Device memory in use now that PyTorch's allocator does not hold: total − free − reserved on CUDA (the
    CUDA context, library workspaces, other processes); 0 elsewhere. Creates the CUDA context if none exists."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return 0
    free, total = torch.cuda.mem_get_info(dev)
    return max(0, int(total - free - torch.cuda.memory_reserved(dev)))


def planned_non_torch_bytes(device: torch.device | str, card_bytes: int | None = None) -> int:
    """The `non_torch_bytes` term of a plan for `device`: 0 on the CPU; on CUDA what is measured now, and
    at least `NON_TORCH_DEFAULT_BYTES` when planning for a card size given by the user (`card_bytes`; the
    workspaces are allocated on first use, after planning, so a measurement before the run misses them)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return 0
    measured = measured_non_torch_bytes(dev)
    return max(measured, NON_TORCH_DEFAULT_BYTES) if card_bytes is not None else measured


def plan_resident_blocks(
    model_config,
    budget_bytes: int,
    latent_h: int,
    latent_w: int,
    cache_config: KVCacheConfig,
    dtype: torch.dtype = torch.bfloat16,
    block_frames: int = 3,
    max_frames: int | None = None,
    vae_bytes: int | None = None,
    other_bytes: int = 0,
    fp8_block_weights: bool = False,
    vae_memory: VAEMemory | None = None,
    decode_overlaps: bool = False,
    non_torch_bytes: int = 0,
) -> tuple[int, MemoryPlan]:
    """The most transformer blocks that can stay on the device (block swap streams the rest) within budget.

    Everything else of the run is planned first (KV cache as requested, activations, VAE, `other_bytes`
    such as a resident text encoder); the blocks get what is left. For each block count the VAE decode
    is made smaller first (`vae.memory.DECODE_SLICINGS`: exact, and cheaper than streaming blocks), so
    the plan names the decode slicing too. Returns (resident_blocks, the plan with them). Raises
    CacheBudgetError naming the cheapest fix when even zero resident blocks (two staging slots) with
    the smallest decode do not fit. The plan, `non_torch_bytes` (the CUDA context and library workspaces,
    `planned_non_torch_bytes()`) included, must fit the budget less `allocator_headroom_bytes`.
    """
    usable = budget_bytes - allocator_headroom_bytes(budget_bytes)
    num_layers = model_config.num_layers
    vae = _vae_memory(model_config.in_dim, latent_h, latent_w, 1, _elem(dtype), 96, vae_bytes, vae_memory)
    plan = None
    for resident in range(num_layers, -1, -1):
        for slicing in vae.slicings:
            plan = plan_memory(
                model_config, latent_h, latent_w, cache_config, dtype=dtype, block_frames=block_frames,
                max_frames=max_frames, resident_blocks=resident, fp8_block_weights=fp8_block_weights,
                vae_memory=vae, decode_slicing=slicing, decode_overlaps=decode_overlaps,
                non_torch_bytes=non_torch_bytes,
            )  # fmt: skip
            if plan.total_bytes + other_bytes <= usable:
                if resident < num_layers:
                    log.info(
                        "memory plan: %d of %d transformer blocks resident (block swap) to fit %s",
                        resident,
                        num_layers,
                        _format_bytes(budget_bytes),
                    )
                if slicing != vae.default and plan.decode is not None:
                    log.info("memory plan: the VAE decodes %s", slicing.describe(block_frames))
                plan.budget_bytes = budget_bytes
                return resident, plan
    assert plan is not None
    short = plan.total_bytes + other_bytes - usable
    cache = plan.requested_cache.device_bytes
    fixes = []
    if other_bytes:
        fixes.append(f"text_encoder_placement='offload' (frees {_format_bytes(other_bytes)})")
    if cache:
        fixes.append(f"a shorter KV window or quantization='int8' (the cache takes {_format_bytes(cache)})")
    if not fp8_block_weights:
        fixes.append("fp8_weights=True")
    context = (
        f", {_format_bytes(non_torch_bytes)} of it the CUDA context and library workspaces" if non_torch_bytes else ""
    )
    raise CacheBudgetError(
        f"even with every transformer block streamed from host memory the run needs "
        f"{_format_bytes(plan.total_bytes + other_bytes)}{context}, {_format_bytes(short)} more than the budget of "
        f"{_format_bytes(budget_bytes)} (less {_format_bytes(budget_bytes - usable)} allocator headroom); try {', or '.join(fixes)}"
    )


def transformer_weight_bytes(
    config, elem: int, resident_blocks: int | None = None, fp8_block_weights: bool = False
) -> int:
    """Device bytes of the transformer's weights: everything, or with block swap the resident blocks,
    the two staging slots and the non-block weights (embeddings, head). fp8_block_weights: the blocks'
    linear weights at one byte each (their biases, norms and modulations stay at `elem`)."""
    layers = config.num_layers
    on_device = layers if resident_blocks is None else min(layers, resident_blocks + min(2, layers - resident_blocks))
    block = config.block_parameters()
    linear_weights = 8 * config.dim * config.dim + 2 * config.dim * config.ffn_dim
    block_bytes = (block - linear_weights) * elem + linear_weights * (1 if fp8_block_weights else elem)
    return (config.num_parameters() - layers * block) * elem + on_device * block_bytes


# --- default budgets and host memory ------------------------------------------------------------------


@dataclass
class HostMemory:
    """Host RAM a run needs beside the device plan: the decoded frames it keeps, vs what is available."""

    frame_bytes: int  # one decoded uint8 frame
    num_frames: int  # video frames the run keeps
    other_bytes: int  # what else lands in host RAM (everything, on the CPU; pinned offload pages on a GPU)
    available_bytes: int
    max_blocks: int  # the most blocks whose frames fit
    message: str = ""

    @property
    def needed_bytes(self) -> int:
        return self.frame_bytes * self.num_frames + self.other_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.available_bytes

    def describe(self) -> str:
        return (
            f"host memory: {self.num_frames} decoded frames kept ({_format_bytes(self.frame_bytes * self.num_frames)})"
            f" + {_format_bytes(self.other_bytes)} of {_format_bytes(self.available_bytes)} available"
        )


def host_available_bytes() -> int:
    """RAM the OS can hand out now without swapping (MemAvailable), else the free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 2**62


def available_memory_bytes(device: torch.device | str) -> tuple[int, str]:
    """(bytes, where from): the default budget when the user gave none. CUDA: free device memory; else host RAM."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        # blocks torch's caching allocator holds but no tensor uses are ours to reuse, not gone
        cached = (
            torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev) if torch.cuda.is_initialized() else 0
        )
        return int(free + max(0, cached)), f"free memory of {dev}"
    return host_available_bytes(), "available host RAM"


def check_host_memory(
    plan: MemoryPlan,
    *,
    frame_bytes: int,
    frames_for_blocks: Callable[[int], int],
    num_blocks: int,
    other_bytes: int,
    available_bytes: int,
) -> HostMemory:
    """Attach the host-memory side of a run to `plan`: decoded frames kept vs RAM; names the most blocks that fit.

    `frames_for_blocks(n)` is the number of video frames n blocks decode to. Allocates nothing.
    """
    lo, hi = 0, num_blocks  # frames grow with blocks: bisect for the largest n that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if frame_bytes * frames_for_blocks(mid) + other_bytes <= available_bytes:
            lo = mid
        else:
            hi = mid - 1
    fit = lo
    host = HostMemory(frame_bytes, frames_for_blocks(num_blocks), other_bytes, available_bytes, fit)
    if not host.fits:
        fix = (
            f"ask for at most {fit} blocks (the cheapest fix), or a smaller width × height"
            if fit > 0
            else "lower width × height or the cache settings; not even one block fits"
        )
        host.message = (
            f"the run needs {_format_bytes(host.needed_bytes)} of host memory ({host.num_frames} decoded frames kept, "
            f"{_format_bytes(host.frame_bytes * host.num_frames)}, + {_format_bytes(other_bytes)}) but only "
            f"{_format_bytes(available_bytes)} is available: {fix}."
        )
    plan.host = host
    return host
