"""What the memory planner adds up, each part stated once: KV cache bytes (`cache_cost`), activations, transformer
weights, offload copy time against compute (`estimate_offload`), allocator headroom and memory outside PyTorch,
and the host's own memory. planner.py composes them into a MemoryPlan; fork_plan.py into a ForkPlan.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from .factory import cache_kind
from .offload_layout import offload_layout
from .paged import planned_pages
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)


GiB = 1024**3


DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def element_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def format_bytes(n: float) -> str:
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
        f"{s.frame_tokens} tokens × {s.num_heads} heads × {s.head_dim}, K and V, {DTYPE_NAMES.get(s.dtype, s.dtype)}"
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


def kv_spec(cfg, latent_h, latent_w, block_frames, batch, dtype, max_frames) -> KVCacheSpec:
    """The KV cache's shape for this run (no tensors: device "meta")."""
    ft = cfg.frame_tokens(latent_h, latent_w)
    return KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, ft, block_frames, batch, dtype, "meta", max_frames)


def activation_bytes(cfg, spec: KVCacheSpec, cache_config: KVCacheConfig) -> int:
    """One block call's activations (estimate; memory-efficient SDPA, so no score matrix): n query tokens
    against a span of keys. `elem·(8·n·dim + 2·n·ffn + 2·span·dim) + 16·n·dim` (float32 RoPE), plus
    float32 dequantization temporaries of the span for a quantized cache."""
    elem = element_bytes(spec.dtype)
    n = spec.batch_size * spec.block_frames * spec.frame_tokens
    span_frames = spec.max_frames if cache_config.is_global else cache_config.window_frames
    span = spec.batch_size * (span_frames or spec.block_frames) * spec.frame_tokens
    acts = elem * (8 * n * cfg.dim + 2 * n * cfg.ffn_dim + 2 * span * cfg.dim) + 8 * 2 * n * cfg.dim  # + RoPE f32
    if cache_config.quantization != "none":
        acts += 4 * 2 * span * cfg.dim  # float32 dequantization temporaries
    return acts


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
            f"host memory: {self.num_frames} decoded frames kept ({format_bytes(self.frame_bytes * self.num_frames)})"
            f" + {format_bytes(self.other_bytes)} of {format_bytes(self.available_bytes)} available"
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


def host_memory(
    frame_bytes: int,
    frames_for_blocks: Callable[[int], int],
    num_blocks: int,
    other_bytes: int,
    available_bytes: int,
) -> HostMemory:
    """The host-memory side of a run: decoded frames kept vs RAM; names the most blocks that fit.

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
            f"the run needs {format_bytes(host.needed_bytes)} of host memory ({host.num_frames} decoded frames kept, "
            f"{format_bytes(host.frame_bytes * host.num_frames)}, + {format_bytes(other_bytes)}) but only "
            f"{format_bytes(available_bytes)} is available: {fix}."
        )
    return host
