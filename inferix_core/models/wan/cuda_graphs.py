"""CUDA-graph capture of whole transformer calls: every block of one denoising step, replayed without host work.

Why: the first blocks of a run are bound by the host's launch rate (docs/performance.md: blocks 0–2 take
the same 0.26 s compiled although their attention grows), and `torch.compile(mode="reduce-overhead")`
cannot help because the 30 blocks share one compiled graph, so its per-region graphs overwrite each
other's outputs. Here one graph holds a whole `CausalWanTransformer.forward` (patch embedding, 30
blocks with their KV-cache writes and attention, head).

What a graph bakes in, and so what keys it (`GraphKey`): the input shapes and dtype, and from the KV
cache (`RingKVCache.graph_key`) the storage addresses of its K/V and write index and the call's new /
attended token counts; and the weights' addresses (a model ComfyUI evicted and loaded back, or a patched
weight, has new ones: checked for every parameter at each stream start, and for the first and last in every
key, so stale graphs are dropped, never replayed). Everything that changes between calls with one key is copied into static
buffers before the replay: the latents, the per-frame timesteps, the chunk's RoPE table (it depends on
the block's position), the prompt's cross-attention K/V (copied only when the prompt changes), and the
cache's write slots (refilled in place by `begin()`, which stays eager on the host). So a global cache
gets one graph per block index while it fills (the attended length grows), and a sliding window gets
one per block index until the window is full, then one graph for every later block (steady state).
Denoising steps and the context pass of a block share its graph (only the timestep values differ).

The first call of a key runs eagerly on a side stream (warm-up: lazy initialisation, cuDNN plans,
`torch.compile` guards; its output is that call's result), then the graph is captured; later calls
replay it. A replay's output is cloned out of the graph's pool before it is returned. Graphs share one
memory pool; they are replayed one at a time in stream order, never concurrently.

Graphs survive across runs only if the KV cache keeps its storage: `kv_cache()` hands the pipeline the
cache it held last, reset, when the config and geometry match and the stream that leased it is over (its
`StreamState` is gone; a stream still running gets a fresh cache). With
`cuda_graphs` on, that cache and the graphs' pool therefore stay allocated between runs
(`held_bytes()`, `release()`).

Where capture is not possible the call runs eagerly and the reason is logged once: not a CUDA device,
block swap or an offloaded / paged / quantized cache (host copies or host-sized indices in every call),
sequence parallelism, per-call action inputs (action-conditioned and Matrix-Game models), a model
compiled with a cudagraph mode, or a capture that failed (the exception is logged; that key stays eager).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ...cache import KVCacheConfig, KVCacheSpec, create_kv_cache

log = logging.getLogger(__name__)

MAX_GRAPHS = 256  # a bound on captured graphs per runner (each key is one block index or the steady state)
_CUDAGRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that capture graphs themselves


@dataclass(frozen=True)
class GraphKey:
    """Everything a captured transformer call depends on besides the static buffers' contents."""

    x_shape: tuple[int, ...]  # (B, C, F, H, W)
    dtype: torch.dtype
    timestep_shape: tuple[int, ...]  # (B, F)
    text_shape: tuple[int, ...]  # one layer's cross-attention K (B, L_text, H, D)
    cache: tuple  # the cache's graph_key(): storage addresses, new / attended tokens
    kernels: tuple = ()  # which attention functions / compiled forwards the blocks call (`_kernel_choice`)
    weights: tuple = ()  # addresses of the first and last weight (a moved model has new ones)


class GraphBackend(Protocol):
    """How graphs are made: CUDA graphs on a GPU; tests substitute a recording emulation on the CPU."""

    def supports(self, device: torch.device) -> str | None:
        """None if graphs can be captured on `device`, else the reason they cannot."""
        ...

    def warmup(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor: ...

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
        """Record fn (its kernels, not their effects); returns (graph, static output)."""
        ...

    def replay(self, graph: Any) -> None: ...

    def pool_bytes(self) -> int: ...


class CudaGraphBackend:
    """torch.cuda.CUDAGraph capture, warm-up on a side stream, one memory pool for all graphs."""

    def __init__(self) -> None:
        self._pool = None
        self._side: torch.cuda.Stream | None = None
        self._graphs: list[torch.cuda.CUDAGraph] = []

    def supports(self, device: torch.device) -> str | None:
        if device.type != "cuda" or not torch.cuda.is_available():
            return f"the model runs on {device.type}, not a CUDA device"
        return None

    def warmup(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        main = torch.cuda.current_stream()
        if self._side is None:
            self._side = torch.cuda.Stream()
        self._side.wait_stream(main)  # inputs (and the cache's write index) are ready on the main stream
        with torch.cuda.stream(self._side):
            out = fn()
        main.wait_stream(self._side)
        out.record_stream(main)  # allocated on the side stream, read on the main one
        return out

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA calls (a UI, a decoder) do not invalidate this capture
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            out = fn()
        if self._pool is None:
            self._pool = graph.pool()
        self._graphs.append(graph)
        return graph, out

    def replay(self, graph: torch.cuda.CUDAGraph) -> None:
        graph.replay()

    def pool_bytes(self) -> int:
        if self._pool is None:
            return 0
        try:  # the private pool's reserved bytes (allocator snapshot segments tagged with the pool id)
            segments = torch.cuda.memory_snapshot()
            return sum(s["total_size"] for s in segments if tuple(s.get("segment_pool_id", ())) == tuple(self._pool))
        except Exception:  # an allocator without pool ids in its snapshot: unknown, reported as 0
            return 0

    def release(self) -> None:
        self._graphs.clear()
        self._pool = None


@dataclass
class _StaticInputs:
    """The buffers a graph reads its per-call inputs from (one set per input shape, shared by its graphs)."""

    x: torch.Tensor
    timestep: torch.Tensor
    freqs: torch.Tensor
    freqs_source: torch.Tensor | None = None  # the table last copied in (RoPE tables are cached per position)


@dataclass
class _Graph:
    graph: Any
    out: torch.Tensor
    replays: int = 0


@dataclass
class GraphStats:
    captures: int = 0
    replays: int = 0
    eager_calls: int = 0  # calls that could not use a graph (reasons in `fallbacks`)
    warmups: int = 0
    failed_captures: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)


class CudaGraphRunner:
    """Runs `model(x, timestep, text, cache, start_frame)` through captured graphs where it can.

    Attach with `enable_cuda_graphs(model)`; `BlockDiffusionPipeline` then calls the runner instead of the
    model and asks it for the KV cache (`kv_cache`). Results equal the eager model's (same kernels on the
    same values; tests/models/test_cuda_graphs*.py).
    """

    def __init__(self, model: torch.nn.Module, backend: GraphBackend | None = None, max_graphs: int = MAX_GRAPHS):
        self._model = weakref.ref(model)  # the model owns the runner (model.cuda_graphs); no cycle back
        self.backend = backend or CudaGraphBackend()
        self.max_graphs = max_graphs
        self.stats = GraphStats()
        self._graphs: dict[GraphKey, _Graph] = {}
        self._failed: set[GraphKey] = set()
        self._inputs: dict[tuple, _StaticInputs] = {}
        self._text_static = None  # CrossAttentionCache of static buffers
        self._text_source: weakref.ref | None = None  # the prompt K/V last copied in
        self._cache_buffers: tuple | None = None  # storage the current graphs were captured against
        self._held_cache = None  # the KV cache kv_cache() reuses across runs
        self._held_for: tuple[KVCacheConfig, KVCacheSpec] | None = None
        self._leased = False  # a live stream (its StreamState) uses the held cache
        self._lease_id = 0
        self._weights: tuple | None = None  # every parameter's and buffer's address when the graphs were captured
        self._logged: set[str] = set()

    @property
    def model(self) -> torch.nn.Module:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this CUDA-graph runner was freed")
        return model

    def runs(self, model: torch.nn.Module) -> bool:
        """Whether this runner replays `model` (a deep copy of a model carries its original's runner)."""
        return self._model() is model

    # -- the KV cache, kept across runs so that its storage (and the graphs on it) stay valid ---------
    def kv_cache(self, config: KVCacheConfig, spec: KVCacheSpec):
        """The cache for a new stream: the one held from the last run (reset) when no stream leases it and it fits.

        Also where moved weights are noticed: a graph reads parameters by address, so when any parameter or
        buffer has moved since the graphs were captured (ComfyUI evicted the model and loaded it back, a
        patch replaced a weight) every graph is dropped and captured again.
        """
        weights = _weight_addresses(self.model)
        if self._weights is not None and weights != self._weights:
            log.info("the model's weights moved since the CUDA graphs were captured; capturing them again")
            self._drop_graphs()
        self._weights = weights
        held = self._held_cache
        if held is not None and self._held_for == (config, spec):
            if not self._leased:
                held.reset()
                return held
            self._note("kv", "another stream still holds the KV cache the CUDA graphs use; this one gets its own")
        self.release()  # the old cache's graphs are useless on new storage
        self._held_cache = create_kv_cache(config, spec)
        self._held_for = (config, spec)
        return self._held_cache

    def lease(self, cache, owner: object) -> None:
        """`cache` (from kv_cache) belongs to the stream whose state is `owner` until `owner` is garbage."""
        if cache is not self._held_cache:
            return
        self._lease_id += 1
        self._leased = True
        weakref.finalize(owner, self._end_lease, self._lease_id)

    def _end_lease(self, lease_id: int) -> None:
        if lease_id == self._lease_id:  # an older lease ending says nothing about the current one
            self._leased = False

    def held_cache_bytes(self) -> int:
        """Device bytes of the KV cache held for the next run (it reuses them: a memory plan may count them free)."""
        cache = self._held_cache
        return 0 if cache is None else int(cache.stats().get("resident_bytes", 0))

    def held_bytes(self) -> int:
        """Device bytes kept between runs: the held KV cache, static buffers and the graphs' pool."""
        total = self.backend.pool_bytes() + self.held_cache_bytes()
        tensors = [t for s in self._inputs.values() for t in (s.x, s.timestep, s.freqs)]
        if self._text_static is not None:
            tensors += [*self._text_static.keys, *self._text_static.values]
        return total + sum(t.numel() * t.element_size() for t in tensors)

    def release(self) -> None:
        """Drop every graph, static buffer and the held cache (their memory returns to the allocator)."""
        self._graphs.clear()
        self._failed.clear()
        self._inputs.clear()
        self._text_static, self._text_source = None, None
        self._cache_buffers = None
        self._held_cache, self._held_for = None, None
        self._leased = False
        self._lease_id += 1  # leases of the dropped cache end without touching the next one's
        release = getattr(self.backend, "release", None)
        if release is not None:
            release()

    # -- one transformer call -------------------------------------------------------------------------
    def unsupported(self, x: torch.Tensor, cache, action) -> str | None:
        """Why this call cannot run from a graph (None: it can)."""
        model = self.model
        reason = self.backend.supports(x.device)
        if reason is not None:
            return reason
        swap = getattr(model, "block_swap", None)
        if swap is not None and swap.swapped:
            return "block swap streams transformer blocks from host memory in every call"
        if getattr(model, "sequence_parallel", None) is not None:
            return "sequence parallelism exchanges tokens between ranks in every call"
        if getattr(model, "compile_mode", None) in _CUDAGRAPH_COMPILE_MODES:
            return f"the blocks are compiled with mode='{model.compile_mode}', which captures CUDA graphs itself"
        if action is not None:
            return "this model takes per-call action inputs (action-conditioned / Matrix-Game)"
        if cache is None or not hasattr(cache, "graph_key"):
            kind = type(cache).__name__ if cache is not None else "no"
            return f"the {kind} KV cache moves data or indices from the host in every call (only the ring cache is captured)"
        if torch.is_grad_enabled():
            return "autograd is on (graphs are captured for inference only)"
        return None

    def __call__(self, x, timestep, text, cache, start_frame: int = 0, action=None) -> torch.Tensor:
        """The model's flow for this call, from a graph when possible (same arguments as the model)."""
        reason = self.unsupported(x, cache, action)
        if reason is not None or isinstance(text, torch.Tensor):
            reason = reason or "the prompt was not prepared (prepare_context) before the call"
            self._note(reason, f"CUDA graphs off for this call: {reason}; running eagerly")
            self.stats.eager_calls += 1
            self.stats.fallbacks[reason] = self.stats.fallbacks.get(reason, 0) + 1
            return self.model(x, timestep, text, cache, start_frame, action=action)
        freqs = self.model.chunk_freqs(self.model.patch_grid(tuple(x.shape)), start_frame, device=x.device)
        cache_key = cache.graph_key()
        if self._cache_buffers is not None and cache_key[-1] != self._cache_buffers:
            self._drop_graphs()  # a different cache's storage: these graphs can never replay again
        self._cache_buffers = cache_key[-1]
        key = GraphKey(
            tuple(x.shape),
            x.dtype,
            tuple(timestep.shape),
            tuple(text.keys[0].shape),
            cache_key,
            _kernel_choice(self.model),
            _weight_probe(self.model),
        )
        static = self._static_inputs(x, timestep, freqs)
        text_static = self._static_text(text)
        static.x.copy_(x)
        static.timestep.copy_(timestep)
        if static.freqs_source is not freqs:
            static.freqs.copy_(freqs)
            static.freqs_source = freqs
        graph = self._graphs.get(key)
        if graph is not None:
            self.backend.replay(graph.graph)
            graph.replays += 1
            self.stats.replays += 1
            return graph.out.clone()  # the pool is reused by the next replay

        cache_ref = weakref.ref(cache)  # a recorded call must not keep the cache alive (kv_cache() counts holders)

        def call() -> torch.Tensor:  # what a graph records: static buffers in, capture-time host values
            return self.model(static.x, static.timestep, text_static, cache_ref(), start_frame, rope_freqs=static.freqs)

        out = self.backend.warmup(call)  # this call's result
        self.stats.warmups += 1
        if key in self._failed or len(self._graphs) >= self.max_graphs:
            if len(self._graphs) >= self.max_graphs:
                self._note("max", f"{self.max_graphs} CUDA graphs captured; further shapes run eagerly")
            self.stats.eager_calls += 1
            return out
        try:
            captured, static_out = self.backend.capture(call)
        except Exception as exc:  # any capture failure falls back to eager, logged
            self._failed.add(key)
            self.stats.failed_captures += 1
            self._note(f"capture:{type(exc).__name__}", f"CUDA graph capture failed ({type(exc).__name__}: "
                       f"{str(exc)[:300]}); calls of this shape run eagerly")  # fmt: skip
            if torch.cuda.is_available() and x.device.type == "cuda":
                torch.cuda.synchronize()
            return out
        self._graphs[key] = _Graph(captured, static_out)
        self.stats.captures += 1
        log.debug("captured CUDA graph %d: %s", len(self._graphs), key)
        return out

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)

    # -- static buffers ---------------------------------------------------------------------------------
    def _static_inputs(self, x: torch.Tensor, timestep: torch.Tensor, freqs: torch.Tensor) -> _StaticInputs:
        key = (tuple(x.shape), x.dtype, tuple(timestep.shape), timestep.dtype, tuple(freqs.shape), x.device)
        static = self._inputs.get(key)
        if static is None:
            static = _StaticInputs(
                torch.empty(x.shape, dtype=x.dtype, device=x.device),
                torch.empty(timestep.shape, dtype=timestep.dtype, device=x.device),
                torch.empty(freqs.shape, dtype=freqs.dtype, device=x.device),
            )
            self._inputs[key] = static
        return static

    def _static_text(self, text):
        """Static cross-attention K/V holding `text`'s values (copied only when the prompt changes)."""
        static = self._text_static
        if static is not None and (
            len(static.keys) != len(text.keys) or static.keys[0].shape != text.keys[0].shape
        ):  # another text length: the graphs read the old buffers, so they go with them
            self._drop_graphs()
            static = None
        if static is None:
            static = type(text)([torch.empty_like(k) for k in text.keys], [torch.empty_like(v) for v in text.values])
            self._text_static, self._text_source = static, None
        if self._text_source is None or self._text_source() is not text:
            for dst, src in zip((*static.keys, *static.values), (*text.keys, *text.values)):
                dst.copy_(src)
            self._text_source = weakref.ref(text)
        return static

    def _drop_graphs(self) -> None:
        self._graphs.clear()
        self._failed.clear()
        release = getattr(self.backend, "release", None)
        if release is not None:
            release()

    def _note(self, key: str, message: str | None = None) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message or key)


def _weight_addresses(model: torch.nn.Module) -> tuple:
    """Addresses of every parameter and buffer (checked once per stream, in `kv_cache`)."""
    return tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers()))


def _weight_probe(model: torch.nn.Module) -> tuple:
    """Addresses of the first and last parameter: a cheap per-call check that the model has not moved."""
    first = next(model.parameters(), None)
    last = getattr(getattr(getattr(model, "head", None), "head", None), "weight", None)
    return tuple(t.data_ptr() for t in (first, last) if t is not None)


def _kernel_choice(model: torch.nn.Module) -> tuple:
    """Identities of what the first block runs: its attention backends and compiled forward.

    A graph replays the kernels recorded at capture; after `set_attention_backend` or `compile_blocks` on the
    same model these change, and so does the key (the old graphs are never replayed for the new setup).
    """
    blocks = getattr(model, "blocks", None)
    if not blocks:
        return ()
    first = blocks[0]
    attends = tuple(
        id(getattr(m, "attend", None)) for m in (getattr(first, "self_attn", None), getattr(first, "cross_attn", None))
    )
    return (*attends, id(getattr(first, "_compiled_call_impl", None)))


def enable_cuda_graphs(model: torch.nn.Module, backend: GraphBackend | None = None) -> CudaGraphRunner | None:
    """Attach a CudaGraphRunner as `model.cuda_graphs` (the pipeline uses it), or say why not and return None.

    Refused up front (logged, the model runs eagerly) where no call could be captured: not on a CUDA
    device, or block swap active. Per-call conditions (cache kind, actions, ...) are checked at each call.
    """
    backend = backend or CudaGraphBackend()
    device = next(model.parameters()).device
    reason = backend.supports(device)
    swap = getattr(model, "block_swap", None)
    if reason is None and swap is not None and swap.swapped:
        reason = "block swap streams transformer blocks from host memory in every call"
    if reason is None and getattr(model, "compile_mode", None) in _CUDAGRAPH_COMPILE_MODES:
        reason = f"the blocks are compiled with mode='{model.compile_mode}', which captures CUDA graphs itself"
    if reason is not None:
        log.warning("cuda_graphs=True ignored: %s; the model runs eagerly", reason)
        model.cuda_graphs = None
        return None
    runner = CudaGraphRunner(model, backend)
    model.cuda_graphs = runner
    log.info("CUDA graphs on: each transformer call shape is captured once and replayed (models/wan/cuda_graphs.py)")
    return runner
