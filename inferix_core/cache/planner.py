"""Memory planner: from model, resolution, window, batch and a GPU budget to a cache configuration.

`plan_memory` adds up the GPU bytes of the transformer weights, the KV cache, the VAE's weights and
decode state (kept for the run) and the larger of one block call's activations and one block decode's
transient; with a budget it picks the fastest exact VAE decode slicing that fits, then keeps the
requested cache configuration if it fits or picks the first feasible alternative (offload, then int8,
then int4 pages, then a shorter window: exactness first). It allocates nothing. KV cache bytes are exact
(the formulas the stores allocate with), the Wan VAE's are counted (vae/memory.py), activations are an
estimate that errs high (docs/memory.md, "How the planner adds up").

The choosing is `memory.compose`'s, in one pass over one `PlanInput` (`RunParts`): the transformer's row (its
model config states it: `cost_row`, models/cost.py), the KV cache's (cache/cost.py), the decoder's (vae/cost.py),
the CUDA context and a resident text encoder as fixed rows; `plan_report.memory_plan` turns the composed plan into
the report, `MemoryPlan`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..errors import CacheBudgetError
from ..memory import CostModel, Fixed, PlanInput, compose, peak_bytes
from ..text.cost import TEXT, TextEncoderCost
from ..vae.cost import DecoderCost, estimated_memory, estimated_vae_bytes
from ..vae.memory import DecodeSlicing, VAEMemory
from .cost import KV, KVCost
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
from .plan_report import CONTEXT, DECODER, MemoryPlan, memory_plan
from .spec import KVCacheConfig, KVCacheSpec

log = logging.getLogger(__name__)

__all__ = [  # the planning API: MemoryPlan and its parts, re-exported from plan_report, plan_costs and fork_plan
    "ALLOCATOR_HEADROOM_FRACTION",
    "NON_TORCH_DEFAULT_BYTES",
    "TRANSFER_SHARE",
    "CacheCost",
    "ForkPlan",
    "HostMemory",
    "MemoryPlan",
    "OffloadEstimate",
    "RunParts",
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
    "run_parts",
    "transformer_weight_bytes",
]


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


def plan_for(given: PlanInput, model_config, cache_config: KVCacheConfig, **rows) -> MemoryPlan:
    """`plan_memory` from one input record (`memory.PlanInput`: the shape, `streams` as the batch, the budget);
    `rows`: `run_parts`' keyword arguments (the same as `plan_memory`'s of those names)."""
    return run_parts(given, model_config, cache_config, **rows).plan(given)


@dataclass(frozen=True)
class RunParts:
    """One run's rows for `memory.compose`, each stated from one `PlanInput`: the transformer's (its model config
    states it: `cost_row`, models/cost.py), the decoder's (vae/cost.py), the KV cache's (cache/cost.py) and the
    CUDA context's; with what the report reads beside them."""

    model_config: object
    cache_config: KVCacheConfig
    spec: KVCacheSpec
    vae: VAEMemory
    transformer: CostModel
    decoder: DecoderCost
    non_torch_bytes: int = 0

    @property
    def parts(self) -> tuple[CostModel, ...]:
        return (
            self.transformer,
            self.decoder,
            KVCost(self.cache_config, self.spec),
            Fixed(CONTEXT, self.non_torch_bytes),
        )

    def fixed_bytes(self, given: PlanInput) -> int:
        """Every row but the KV cache at its first option, added as `compose` adds them (kept + the transient
        peak): what a cache with a budget of its own sits beside (`MemoryPlan.fixed_bytes`), from the rows."""
        return peak_bytes([p.options(given)[0] for p in self.parts if p.name != KV], given.decode_overlaps)

    def plan(self, given: PlanInput) -> MemoryPlan:
        """The one composition (the decoder gives way) and its report."""
        composed = compose(given, self.parts, give_way=(DECODER,))
        decode = composed.cost(DECODER).option
        if len(self.decoder.slicings) > 1 and decode is not None and decode.slicing != self.vae.default:
            log.info("memory plan: the VAE decodes %s", decode.slicing.describe(given.block_frames))
        return memory_plan(composed, self)


def run_parts(
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
) -> RunParts:
    """The rows `plan_for` composes, `plan_memory`'s arguments of the same names. The decoder offers the VAE's own
    slicing only (or `decode_slicing`) without a budget in `given`; with one, every smaller slicing after it."""
    cfg, batch, block_frames = model_config, given.streams, given.block_frames
    elem = element_bytes(given.dtype)
    spec = kv_spec(cfg, given.latent_h, given.latent_w, block_frames, batch, given.dtype, given.max_frames)
    cache_config.check_block(block_frames)
    vae = _vae_memory(cfg.in_dim, given.latent_h, given.latent_w, batch, elem, vae_dim, vae_bytes, vae_memory)
    if decode_slicing is not None or given.budget_bytes is None:
        slicings = (vae.default if decode_slicing is None else decode_slicing,)
    else:
        slicings = vae.slicings  # with a budget: the fastest that leaves the requested cache room
    transformer = cfg.cost_row(spec, cache_config, elem, (resident_blocks,), fp8_block_weights)
    return RunParts(cfg, cache_config, spec, vae, transformer, DecoderCost(vae, slicings), non_torch_bytes)


def _vae_memory(latent_channels, latent_h, latent_w, batch, elem, vae_dim, vae_bytes, vae_memory) -> VAEMemory:
    """The decoder's memory model: given, a fixed number, or the Wan 2.1 / 2.2 VAE by the latent channels."""
    if vae_memory is not None:
        return vae_memory
    if vae_bytes is not None:
        return VAEMemory.fixed(vae_bytes)
    if latent_channels == 48:  # the Wan 2.2 VAE: its own estimate (vae.cost)
        return VAEMemory.fixed(estimated_vae_bytes(48, latent_h, latent_w, 1, batch, elem))
    return estimated_memory(latent_h, latent_w, batch, elem, vae_dim)


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
    transformer = model_config.cost_row(spec, cache_config, elem, range(num_layers, -1, -1), fp8_block_weights)
    run = RunParts(model_config, cache_config, spec, vae, transformer, DecoderCost(vae, vae.slicings), non_torch_bytes)
    text_row = text if text is not None else Fixed(TEXT, other_bytes)
    # one composition: the decode gives way first (it is exact), then the blocks; a text encoder last
    composed = compose(given, [*run.parts, text_row], give_way=(DECODER, transformer.name), last=(TEXT,))
    other_bytes = composed.cost(TEXT).kept_bytes
    resident = composed.cost(transformer.name).option
    decode = composed.cost(DECODER).option
    if composed.fits:
        if resident < num_layers:
            log.info(
                "memory plan: %d of %d transformer blocks resident (block swap) to fit %s",
                resident,
                num_layers,
                format_bytes(budget_bytes),
            )
        if decode is not None and decode.slicing != vae.default:
            log.info("memory plan: the VAE decodes %s", decode.slicing.describe(block_frames))
        plan = memory_plan(composed, run)  # the report of the rows chosen (the text row is not one of its rows)
        plan.budget_bytes = budget_bytes
        plan.text_placement = composed.cost(TEXT).option
        return resident, plan
    total = peak_bytes([c for c in composed.costs if c.component != TEXT], decode_overlaps)  # the run's, no encoder
    short = total + other_bytes - usable
    cache = composed.cost(KV).option[1].device_bytes  # the requested cache (it never gives way)
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
        f"{format_bytes(total + other_bytes)}{context}, {format_bytes(short)} more than the budget of "
        f"{format_bytes(budget_bytes)} (less {format_bytes(budget_bytes - usable)} allocator headroom); try {', or '.join(fixes)}"
    )
