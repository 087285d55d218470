"""A run's memory plan before anything is loaded or allocated (`plan_run`) and its refusal when it cannot fit
(`check_plan`)."""

from __future__ import annotations

import logging
from dataclasses import replace

from ..cache import KVCacheConfig, MemoryPlan
from ..cache.planner import run_parts
from ..errors import CacheBudgetError
from ..memory import PlanInput
from ..models.registry import WorldModel
from ..pipeline import SamplingConfig
from .conditioning import latent_size

log = logging.getLogger(__name__)


def plan_run(
    world_model: WorldModel,
    cache: KVCacheConfig | None,
    width: int,
    height: int,
    num_blocks: int,
    sampling: SamplingConfig | None = None,
    num_initial_frames: int = 0,
    available_bytes: int | None = None,
    streams: int = 1,
) -> MemoryPlan:
    """The memory plan of one run, with `cache.gpu_budget_bytes` as the KV cache's share of the GPU.

    The planner's budget covers the whole run (weights, activations, VAE, cache); the cache config's
    budget is the cache alone, so the run budget is the rest plus that share. Without one, the budget is
    what the device has free now (CUDA) plus the weights already loaded there; on the CPU the whole plan
    is host memory. Either way the decoded frames the run keeps (uint8, in host RAM) are counted against
    the RAM available (`available_bytes`, default: MemAvailable). `check_plan` refuses what does not fit,
    before anything is allocated, naming the cheapest fix. Allocates nothing. One `memory.PlanInput` is built
    (`streams`: runs batched as one, each a batch row with its own decoder and frames); the budget fills it in,
    and the rows stated from it (`cache.planner.RunParts`) are composed once: with the cache's own budget, the
    rest it sits beside is read off the same rows (`RunParts.fixed_bytes`), not off a first plan.
    """
    from ..cache.plan_costs import available_memory_bytes, host_available_bytes, host_memory

    sampling = sampling or world_model.sampling
    cache = cache or world_model.default_cache
    lat_h, lat_w = latent_size(world_model, width, height)
    on_cuda = world_model.device.type == "cuda"
    max_frames = num_initial_frames + num_blocks * sampling.block_frames
    given = PlanInput(lat_h, lat_w, sampling.block_frames, max_frames, streams, dtype=world_model.dtype,
                      on_cuda=on_cuda)  # fmt: skip  # the one input record; the budget is filled in below
    parts = dict(
        vae_dim=getattr(getattr(world_model.vae, "config", None), "dim", 96),
        **decoder_memory(world_model.vae, lat_h, lat_w, sampling.block_frames, streams),
    )
    source = "explicit"
    if cache.gpu_budget_bytes is None and on_cuda:  # no budget given: what the GPU has free, plus the weights there
        free, source = available_memory_bytes(world_model.device)
        given = replace(given, budget_bytes=free + resident_bytes(world_model))
    run = run_parts(given, world_model.config, cache, **parts)  # with no budget yet: the VAE's own decode slicing
    if cache.gpu_budget_bytes is not None:  # the cache's share beside the rest, read off the same rows
        given = replace(given, budget_bytes=run.fixed_bytes(given) + cache.gpu_budget_bytes)
    plan = run.plan(given)  # the one composition
    plan.budget_source = source
    plan.device_type = world_model.device.type  # the plan's text says where its totals live
    host_free = host_available_bytes() if available_bytes is None else available_bytes
    cost = plan.chosen_cache or plan.requested_cache
    # on the CPU everything is host memory (the loaded weights are already out of MemAvailable)
    other = cost.host_bytes if on_cuda else max(0, plan.total_bytes - resident_bytes(world_model))
    tc = world_model.temporal_compression
    plan.host = host_memory(
        frame_bytes=width * height * 3 * streams,
        frames_for_blocks=lambda n: 1 + tc * (n * sampling.block_frames - 1) if n > 0 else 0,
        num_blocks=num_blocks,
        other_bytes=other,
        available_bytes=host_free,
    )
    return plan


def resident_bytes(world_model: WorldModel) -> int:
    """Bytes of the transformer and VAE weights already on the model's device (the plan counts them; the
    free memory measured now does not)."""
    kind = world_model.device.type
    graphs = getattr(world_model.transformer, "cuda_graphs", None)  # its KV cache, held for the next run to reuse
    total = graphs.held_cache_bytes() if graphs is not None else 0
    for module in (world_model.transformer, world_model.vae):
        if module is not None and hasattr(module, "parameters"):
            total += sum(p.numel() * p.element_size() for p in module.parameters() if p.device.type == kind)
    return total


def decoder_memory(vae, lat_h: int, lat_w: int, block_frames: int, streams: int = 1) -> dict:
    """The planner's arguments for the model's own decoder: a Wan 2.1 VAE's counted memory model (so the
    plan may slice its decode), another decoder's weights + working set; nothing (the Wan estimate) without one."""
    from ..vae import Wan22VAE, WanVAE
    from ..vae.memory import VAEMemory

    if isinstance(vae, WanVAE) and not isinstance(vae, Wan22VAE):
        return {"vae_memory": VAEMemory.for_vae(vae, lat_h, lat_w, streams)}
    if vae is None or not hasattr(vae, "decode_working_set_bytes"):
        return {}
    weights = sum(p.numel() * p.element_size() for p in vae.parameters())
    return {"vae_bytes": (weights + vae.decode_working_set_bytes(lat_h, lat_w, block_frames)) * streams}


def check_plan(plan: MemoryPlan, world_model: WorldModel | None = None) -> KVCacheConfig:
    """The requested cache config if it fits its budget; else CacheBudgetError with the planner's advice.

    Stricter than `plan.check()`, which accepts a substitute (offload, int8, a shorter window): we never
    change the user's cache settings behind their back, we tell them which change fits. With
    `world_model`, its Wan VAE decodes as planned (a smaller decode slicing gives the same frames).
    """
    chosen = plan.check()  # also refuses when the frames kept do not fit host memory
    if chosen != plan.requested:
        raise CacheBudgetError(plan.message)
    vae = getattr(world_model, "vae", None)
    slicing = plan.decode.slicing if plan.decode is not None else None
    if slicing is not None and getattr(vae, "stream_slicing", slicing) != slicing:
        log.info("the VAE decodes %s, as planned for the budget", slicing.describe(plan.block_frames))
        vae.stream_slicing = slicing
    return chosen
