"""The planner's report: `MemoryPlan` (what a run needs on the device, the cache configuration that fits or why
none does) and `memory_plan`, which reads it off one `memory.compose` result (the rows of planner.py's
`RunParts`: transformer, decoder, KV cache, CUDA context)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from ..errors import CacheBudgetError
from ..vae.memory import DecodeMemory
from .cost import KV
from .plan_costs import (
    TRANSFER_SHARE,
    CacheCost,
    HostMemory,
    OffloadEstimate,
    estimate_offload,
    format_bytes,
)
from .spec import KVCacheConfig

log = logging.getLogger(__name__)

DECODER, CONTEXT = "decoder", "cuda context"  # the other rows' names (TEXT: text/cost.py)


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


def memory_plan(composed, run) -> MemoryPlan:
    """The run's MemoryPlan (its report: rows, message, the cache that fits) from the composed one; `run`: the
    rows composed and what they were stated from (planner.py `RunParts`)."""
    cfg, spec, cache_config, vae = run.model_config, run.spec, run.cache_config, run.vae
    given = composed.given
    transformer, decoder = composed.cost(run.transformer.name), composed.cost(DECODER)
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
    if plan.requested_cache is None:  # offload as asked cannot even hold its staging layers: no plan to report
        fitting = next((label for label, _, fits in plan.candidates if fits), None)
        reason = composed.cost(KV).formula  # the cache's own refusal (cost.KVCost.row)
        raise CacheBudgetError(reason + (f" Of the alternatives, {fitting} fits." if fitting else ""))
    plan.message = _budget_message(plan, avail, window) + _offload_warning(plan.offload)
    log.info("%s", plan.message)
    return plan


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
