"""Memory planner: from model, resolution, window, batch and a GPU budget to a cache configuration.

`plan_memory` adds up the GPU bytes of the transformer weights, the KV cache, the VAE's weights and
decode state (kept for the run) and the larger of one block call's activations and one block decode's
transient; with a budget it picks the fastest exact VAE decode slicing that fits, then keeps the
requested cache configuration if it fits or picks the first feasible alternative (offload, then int8,
then int4 pages, then a shorter window: exactness first). It allocates nothing. KV cache bytes are exact
(the formulas the stores allocate with), the Wan VAE's are counted (vae/memory.py), activations are an
estimate that errs high (docs/memory.md, "How the planner adds up").

The choosing is `memory.compose`'s: the transformer and KV rows (cache/cost.py), the decoder's (vae/cost.py), the
CUDA context and a resident text encoder as fixed rows; `memory_plan` turns the composed plan into this report.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import torch

from ..errors import CacheBudgetError
from ..memory import Fixed, PlanInput, compose
from ..text.cost import TEXT, TextEncoderCost
from ..vae.cost import DecoderCost, estimated_memory, estimated_vae_bytes
from ..vae.memory import DecodeMemory, DecodeSlicing, VAEMemory
from .cost import KV, TRANSFORMER, KVCost, TransformerCost
from .fork_plan import ForkPlan, fork_pages, plan_forks
from .plan_costs import (
    ALLOCATOR_HEADROOM_FRACTION,
    NON_TORCH_DEFAULT_BYTES,
    TRANSFER_SHARE,
    CacheCost,
    HostMemory,
    OffloadEstimate,
    activation_bytes,
    allocator_headroom_bytes,
    available_memory_bytes,
    cache_cost,
    element_bytes,
    estimate_offload,
    format_bytes,
    host_available_bytes,
    host_memory,
    kv_spec,
    measured_non_torch_bytes,
    planned_non_torch_bytes,
    transformer_weight_bytes,
)
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)

DECODER, CONTEXT = "decoder", "cuda context"  # the other rows' names (TEXT: text/cost.py)

__all__ = [  # the planning API: MemoryPlan and its parts, re-exported from plan_costs and fork_plan
    "ALLOCATOR_HEADROOM_FRACTION",
    "NON_TORCH_DEFAULT_BYTES",
    "TRANSFER_SHARE",
    "CacheCost",
    "ForkPlan",
    "HostMemory",
    "MemoryPlan",
    "OffloadEstimate",
    "activation_bytes",
    "allocator_headroom_bytes",
    "available_memory_bytes",
    "cache_cost",
    "estimate_offload",
    "fork_pages",
    "host_available_bytes",
    "host_memory",
    "measured_non_torch_bytes",
    "plan_for",
    "plan_forks",
    "plan_memory",
    "plan_resident_blocks",
    "planned_non_torch_bytes",
    "transformer_weight_bytes",
]


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
    host: HostMemory | None = (
        None  # frames kept in host memory vs the RAM available (set by `run_plan.plan_run` with `host_memory`)
    )
    vae_weights_bytes: int = 0
    decode: DecodeMemory | None = None  # the Wan 2.1 VAE decode as planned: state, transient, the slicing chosen
    block_frames: int = 3
    decode_overlaps: bool = False
    non_torch_bytes: int = 0  # CUDA context + cuBLAS/cuDNN workspaces: on the card, outside PyTorch's allocator
    device_type: str = "cuda"  # where the run's tensors live ("cpu": the totals are host memory)
    text_placement: str | None = None  # the text encoder's placement as planned (plan_resident_blocks' text row)

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
        lines = ["Memory plan"] + [f"  {name:<40} {format_bytes(n):>10}" for name, n in rows]
        overlap = (
            "activations + decode (overlapped)" if self.decode_overlaps else "the larger of activations and decode"
        )
        where = "total on the GPU" if self.device_type == "cuda" else f"total in {self.device_type.upper()} memory"
        lines.append(f"  {where:<40} {format_bytes(self.total_bytes):>10}  ({overlap} counted)")
        budget = format_bytes(self.budget_bytes) if self.budget_bytes else "none"
        source = f" ({self.budget_source})" if self.budget_bytes and self.budget_source != "explicit" else ""
        lines.append(f"  {'budget':<40} {budget:>10}{source}")
        lines.append(f"  cache: {(self.chosen_cache or self.requested_cache).formula}")
        if self.decode is not None and self.decode.transient_bytes:
            lines.append(f"  VAE decode: {self.decode.slicing.describe(self.block_frames)}; {self.decode.formula}")
        host = (self.chosen_cache or self.requested_cache).host_bytes
        if host:
            lines.append(f"  pinned host memory for offloaded pages: {format_bytes(host)}")
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
    given = PlanInput(latent_h, latent_w, block_frames, max_frames, batch, dtype=dtype, budget_bytes=budget_bytes,
                      decode_overlaps=decode_overlaps)  # fmt: skip
    return plan_for(
        given, model_config, cache_config, vae_dim=vae_dim, vae_bytes=vae_bytes, resident_blocks=resident_blocks,
        fp8_block_weights=fp8_block_weights, vae_memory=vae_memory, decode_slicing=decode_slicing,
        non_torch_bytes=non_torch_bytes,
    )  # fmt: skip


def plan_for(
    given: PlanInput,
    model_config,
    cache_config: KVCacheConfig,
    *,
    vae_dim: int = 96,
    vae_bytes: int | None = None,
    resident_blocks: int | None = None,
    fp8_block_weights: bool = False,
    vae_memory: VAEMemory | None = None,
    decode_slicing: DecodeSlicing | None = None,
    non_torch_bytes: int = 0,
) -> MemoryPlan:
    """`plan_memory` from one input record (`memory.PlanInput`: the shape, `streams` as the batch, the budget);
    the rest as `plan_memory`'s arguments of the same names."""
    cfg, batch, block_frames = model_config, given.streams, given.block_frames
    elem = element_bytes(given.dtype)
    spec = kv_spec(cfg, given.latent_h, given.latent_w, block_frames, batch, given.dtype, given.max_frames)
    cache_config.check_block(block_frames)
    vae = _vae_memory(cfg.in_dim, given.latent_h, given.latent_w, batch, elem, vae_dim, vae_bytes, vae_memory)
    if decode_slicing is not None or given.budget_bytes is None:
        slicings = (vae.default if decode_slicing is None else decode_slicing,)
    else:
        slicings = vae.slicings  # with a budget: the fastest that leaves the requested cache room
    parts = [
        TransformerCost(cfg, spec, cache_config, elem, (resident_blocks,), fp8_block_weights),
        DecoderCost(vae, slicings),
        KVCost(cache_config, spec),
        Fixed(CONTEXT, non_torch_bytes),
    ]
    composed = compose(given, parts, give_way=(DECODER,))
    decode = composed.cost(DECODER).option
    if len(slicings) > 1 and decode is not None and decode.slicing != vae.default:
        log.info("memory plan: the VAE decodes %s", decode.slicing.describe(block_frames))
    return memory_plan(composed, cfg, spec, cache_config, vae)


def memory_plan(composed, cfg, spec: KVCacheSpec, cache_config: KVCacheConfig, vae: VAEMemory) -> MemoryPlan:
    """The run's MemoryPlan (its report: rows, message, the cache that fits) from the composed one."""
    given = composed.given
    transformer, decoder = composed.cost(TRANSFORMER), composed.cost(DECODER)
    _, requested_cost = composed.cost(KV).option
    decode = decoder.option
    plan = MemoryPlan(
        given.budget_bytes, transformer.kept_bytes, transformer.transient_bytes,
        decoder.kept_bytes + decoder.transient_bytes, cache_config, requested_cost, cache_config, requested_cost, "",
        vae_weights_bytes=vae.weights_bytes, decode=decode, block_frames=given.block_frames,
        decode_overlaps=given.decode_overlaps, non_torch_bytes=composed.cost(CONTEXT).kept_bytes,
    )  # fmt: skip
    if composed.fits:
        if requested_cost.kind == "offload":
            plan.offload = estimate_offload(cfg, spec, cache_config)
        return plan
    avail = given.budget_bytes - plan.fixed_bytes
    plan.chosen, plan.chosen_cache, window = None, None, None
    for cost, fits in composed.fallbacks[KV]:
        config, cache = cost.option
        plan.candidates.append((cost.label, cost.kept_bytes, fits))
        if fits and plan.chosen is None:
            plan.chosen, plan.chosen_cache = config, cache
        if cost.label.startswith("window_frames="):
            window = config.window_frames
    if plan.chosen_cache is not None and plan.chosen_cache.kind == "offload":
        plan.offload = estimate_offload(cfg, spec, plan.chosen)
    plan.message = _budget_message(plan, avail, window) + _offload_warning(plan.offload)
    log.info("%s", plan.message)
    return plan


def _vae_memory(latent_channels, latent_h, latent_w, batch, elem, vae_dim, vae_bytes, vae_memory) -> VAEMemory:
    """The decoder's memory model: given, a fixed number, or the Wan 2.1 / 2.2 VAE by the latent channels."""
    if vae_memory is not None:
        return vae_memory
    if vae_bytes is not None:
        return VAEMemory.fixed(vae_bytes)
    if latent_channels == 48:  # the Wan 2.2 VAE: its own estimate (vae.cost)
        return VAEMemory.fixed(estimated_vae_bytes(48, latent_h, latent_w, 1, batch, elem))
    return estimated_memory(latent_h, latent_w, batch, elem, vae_dim)


def _budget_message(plan: MemoryPlan, avail: int, window: int | None) -> str:
    """Why the requested cache does not fit, the fixes, and (when nothing fits) what each alternative needs."""
    req = plan.requested_cache
    hints = []
    if window is not None and window != plan.requested.window_frames:
        hints.append(f"lower window_frames to {window}")
    hints += ["set quantization='int8'", "or enable offload"]
    left = f"{format_bytes(avail)}" if avail > 0 else f"nothing ({format_bytes(-avail)} short before the cache)"
    message = (
        f"KV cache needs {format_bytes(req.device_bytes)} ({req.formula}) but the budget of "
        f"{format_bytes(plan.budget_bytes)} leaves {left} for it (weights {format_bytes(plan.weights_bytes)}, "
        f"activations {format_bytes(plan.activation_bytes)}, VAE {format_bytes(plan.vae_bytes)}). "
        f"{', '.join(hints).capitalize()}."
    )
    if plan.chosen is None:
        message += (
            " None of these fits: "
            + "; ".join(
                f"{lab} needs {format_bytes(b)}" if b >= 0 else f"{lab} cannot fit its staging buffers"
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


"""Device memory outside PyTorch's allocator on a card the user names by its size (`gpu_memory`): the CUDA
context with the kernels loaded, cuBLAS's and cuDNN's workspaces. The H200 showed 0.73 GiB of it in the
1.3B + Wan VAE run's out-of-memory report (docs/performance.md); 0.75 GiB is that, rounded up."""


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
    text: TextEncoderCost | None = None,
) -> tuple[int, MemoryPlan]:
    """The most transformer blocks that can stay on the device (block swap streams the rest) within budget.

    Everything else of the run is planned first (KV cache as requested, activations, VAE, `other_bytes`
    such as a resident text encoder); the blocks get what is left. `text` (text/cost.py; instead of
    `other_bytes`): a resident encoder that leaves no plan gives way last (`memory.compose`'s `last`), to
    'offload' when it fits beside what the run keeps, else 'cpu'; `plan.text_placement` names the result. For each block count the VAE decode
    is made smaller first (`vae.memory.DECODE_SLICINGS`: exact, and cheaper than streaming blocks), so
    the plan names the decode slicing too. Returns (resident_blocks, the plan with them). Raises
    CacheBudgetError naming the cheapest fix when even zero resident blocks (two staging slots) with
    the smallest decode do not fit. The plan, `non_torch_bytes` (the CUDA context and library workspaces,
    `planned_non_torch_bytes()`) included, must fit the budget less `allocator_headroom_bytes`.
    """
    usable = budget_bytes - allocator_headroom_bytes(budget_bytes)
    num_layers = model_config.num_layers
    elem = element_bytes(dtype)
    vae = _vae_memory(model_config.in_dim, latent_h, latent_w, 1, elem, 96, vae_bytes, vae_memory)
    spec = kv_spec(model_config, latent_h, latent_w, block_frames, 1, dtype, max_frames)
    given = PlanInput(latent_h, latent_w, block_frames, max_frames, dtype=dtype, budget_bytes=usable,
                      decode_overlaps=decode_overlaps)  # fmt: skip
    parts = [
        TransformerCost(model_config, spec, cache_config, elem, tuple(range(num_layers, -1, -1)), fp8_block_weights),
        DecoderCost(vae, vae.slicings),
        KVCost(cache_config, spec),
        Fixed(CONTEXT, non_torch_bytes),
        text if text is not None else Fixed(TEXT, other_bytes),
    ]  # the decode gives way first (it is exact), then the blocks; a text encoder last
    composed = compose(given, parts, give_way=(DECODER, TRANSFORMER), last=(TEXT,))
    other_bytes = composed.cost(TEXT).kept_bytes
    resident = composed.cost(TRANSFORMER).option
    decode = composed.cost(DECODER).option
    slicing = vae.default if decode is None else decode.slicing
    plan = plan_memory(
        model_config, latent_h, latent_w, cache_config, dtype=dtype, block_frames=block_frames,
        max_frames=max_frames, resident_blocks=resident, fp8_block_weights=fp8_block_weights,
        vae_memory=vae, decode_slicing=slicing, decode_overlaps=decode_overlaps, non_torch_bytes=non_torch_bytes,
    )  # fmt: skip
    if composed.fits:
        if resident < num_layers:
            log.info(
                "memory plan: %d of %d transformer blocks resident (block swap) to fit %s",
                resident,
                num_layers,
                format_bytes(budget_bytes),
            )
        if slicing != vae.default and plan.decode is not None:
            log.info("memory plan: the VAE decodes %s", slicing.describe(block_frames))
        plan.budget_bytes = budget_bytes
        plan.text_placement = composed.cost(TEXT).option
        return resident, plan
    short = plan.total_bytes + other_bytes - usable
    cache = plan.requested_cache.device_bytes
    fixes = []
    if other_bytes:
        fixes.append(f"text_encoder_placement='offload' (frees {format_bytes(other_bytes)})")
    if cache:
        fixes.append(f"a shorter KV window or quantization='int8' (the cache takes {format_bytes(cache)})")
    if not fp8_block_weights:
        fixes.append("fp8_weights=True")
    context = (
        f", {format_bytes(non_torch_bytes)} of it the CUDA context and library workspaces" if non_torch_bytes else ""
    )
    raise CacheBudgetError(
        f"even with every transformer block streamed from host memory the run needs "
        f"{format_bytes(plan.total_bytes + other_bytes)}{context}, {format_bytes(short)} more than the budget of "
        f"{format_bytes(budget_bytes)} (less {format_bytes(budget_bytes - usable)} allocator headroom); try {', or '.join(fixes)}"
    )
