"""One block step for several streams at once: one batch per transformer call, each stream its own pages.

Why: N streams (forks of one world, or independent sessions) on one GPU cost N× the FLOPs but not N×
the launches and weight reads when they run as one batch. Each stream keeps its own `StreamState`
(page table in a shared `PageArena`, prompt K/V, noise generator, position); `denoise_streams` stacks
them along the batch, runs the same loop as `BlockDiffusionPipeline.denoise_block` (noise → steps →
context pass) and hands each stream back its own `BlockOutput`.

Equal results: every stream draws its own noise in its own order and reads its own K/V in the order a
plain run would, so a stream batched with others equals the same stream run alone up to the batch's
matmul rounding (bitwise where the kernels are batch-invariant; ≤ 1e-5 in fp32 on CPU, tested).
Streams at different positions get per-row RoPE positions, and spans of unequal length a key mask.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from ..cache.shared import BatchedStreamKV, StreamKVCache
from ..errors import ConfigError, ShapeMismatchError
from ..tensors import to_device_async
from .block_diffusion import BlockDiffusionPipeline, BlockOutput, PipelineHooks, StreamState


class _StackedText:
    """The prompts' cross-attention K/V of several streams, stacked along the batch (keys/values per layer),
    the shape of a model's `CrossAttentionCache` (the pipeline does not import models)."""

    def __init__(self, texts: list):
        n = len(texts[0].keys)
        lengths = {tuple(t.keys[0].shape[1:]) for t in texts}
        if len(lengths) != 1:
            raise ShapeMismatchError(f"streams batched together need prompt K/V of one shape; got {sorted(lengths)}")
        self.keys = [torch.cat([t.keys[i] for t in texts]) for i in range(n)]
        self.values = [torch.cat([t.values[i] for t in texts]) for i in range(n)]
        # Wan 2.1 I2V: the start image's own K/V beside the prompt's (all streams have them, or none)
        images = [getattr(t, "image_keys", None) is not None for t in texts]
        if any(images) and not all(images):
            raise ShapeMismatchError("streams batched together need a start image each, or none")
        self.image_keys = [torch.cat([t.image_keys[i] for t in texts]) for i in range(n)] if all(images) else None
        self.image_values = [torch.cat([t.image_values[i] for t in texts]) for i in range(n)] if all(images) else None


def check_batchable(pipe: BlockDiffusionPipeline, states: list[StreamState]) -> None:
    """Refuse what a batched step does not run yet, naming it (one-line errors)."""
    if not states:
        raise ConfigError("no streams to step")
    cfg = pipe.model.config
    if getattr(cfg, "action_config", None) is not None:
        raise ConfigError("Matrix-Game models (action caches) cannot run batched streams yet; run them one at a time")
    if pipe.sampling.kv_recompute_frames:
        raise ConfigError("KV recompute (Krea) rebuilds each stream's cache per block; run those streams one at a time")
    if getattr(pipe.model, "sequence_parallel", None) is not None:
        raise ConfigError("batched streams do not run under sequence parallelism yet")
    for i, st in enumerate(states):
        if not isinstance(st.cache, StreamKVCache):
            raise ConfigError(
                f"stream {i} has a {type(st.cache).__name__}; batched streams need pages in a shared arena "
                "(start them with inferix_core.pipeline.streams.start_stream or MultiStreamEngine.admit)"
            )
        if st.batch_size != 1:
            raise ConfigError(f"stream {i} has batch {st.batch_size}; batched streams are one batch row each")
        if st.clean_prefix is not None:
            raise ConfigError(f"stream {i} holds clean first latents; run its first block alone (denoise_block)")
    sizes = {(st.latent_height, st.latent_width) for st in states}
    if len(sizes) != 1:
        raise ConfigError(f"streams batched together need one latent size; got {sorted(sizes)}")


def denoise_streams(
    pipe: BlockDiffusionPipeline,
    states: list[StreamState],
    actions: list[torch.Tensor | None] | None = None,
    hooks: PipelineHooks | None = None,
) -> list[BlockOutput]:
    """Generate the next block of every stream, batched; returns one BlockOutput per stream, in order.

    Args:
        actions: per stream (1, block_frames, action_dim) or None. Streams whose actions are None and
            streams with actions, or streams on different timestep lists (a first block with its own
            list), run as separate batches of the same step.
    """
    check_batchable(pipe, states)
    actions = list(actions) if actions is not None else [None] * len(states)
    if len(actions) != len(states):
        raise ConfigError(f"{len(actions)} action rows for {len(states)} streams")
    groups: dict[tuple, list[int]] = {}
    for i, st in enumerate(states):
        timesteps = tuple(pipe.schedule.begin(st.next_block).timesteps.tolist())
        groups.setdefault((timesteps, actions[i] is None), []).append(i)
    outputs: list[BlockOutput | None] = [None] * len(states)
    for members in groups.values():
        outs = _denoise_group(pipe, [states[i] for i in members], [actions[i] for i in members], hooks)
        for i, out in zip(members, outs, strict=True):
            outputs[i] = out
    return outputs


def denoise_many(
    pipe: BlockDiffusionPipeline,
    states: list[StreamState],
    actions: list | None = None,
    hooks: PipelineHooks | None = None,
    encoders: list | None = None,
) -> list[BlockOutput]:
    """Every stream's next block, whatever the model: one batch per transformer call (`denoise_streams`), or,
    where each stream rebuilds its own cache every block (Krea's KV recompute), one stream after another through
    `denoise_block`, each with its own pixel window (`encoders[i]`, keep_first_frame=False). The one many-stream
    body of the engine: `Engine.step_many` calls it (`Branches`, `LiveBranch` and `MultiStreamEngine` step through it)."""
    actions = list(actions) if actions is not None else [None] * len(states)
    if not pipe.sampling.kv_recompute_frames:
        return denoise_streams(pipe, states, actions, hooks)
    outs, own = [], pipe.first_frame_encoder
    try:
        for i, (state, action) in enumerate(zip(states, actions, strict=True)):
            if encoders is not None:
                pipe.first_frame_encoder = encoders[i]
            outs.append(pipe.denoise_block(state, action, hooks))
    finally:
        pipe.first_frame_encoder = own
    return outs


@torch.no_grad()
def _denoise_group(pipe, states, actions, hooks) -> list[BlockOutput]:
    hooks = hooks or PipelineHooks()
    cfg, n = pipe.model.config, pipe.sampling.block_frames
    one = (1, n, cfg.out_dim, states[0].latent_height, states[0].latent_width)
    t0 = time.perf_counter()
    starts = [st.next_frame for st in states]
    offsets = [st.rope_offset for st in states]  # LongLive 2.0 shots: each stream's own RoPE shift
    for st in states:
        hooks.on_block_start(st.next_block, st.next_frame)
    x = torch.cat([to_device_async(st.noise.initial(st.next_block * n, one).float(), pipe.device) for st in states])

    def renoise(step: int) -> torch.Tensor:
        return torch.cat([to_device_async(st.noise.step(st.next_block, step, one), pipe.device) for st in states])

    batch = BatchedStreamKV([st.cache for st in states])
    text = _StackedText([st.text for st in states])
    action = None if actions[0] is None else _stack_actions(actions, pipe.device, n)
    solve = pipe.schedule.begin(states[0].next_block)  # a fresh solve per group: no history shared
    x0 = x
    for t in solve.timesteps.tolist():
        hooks.check_interrupt()
        with hooks.stage("denoise"):
            flow = _call(pipe, batch, text, x, t, starts, n, action, offsets)
            out = solve.step(flow.float(), x, renoise)
            x0, x = out.x0, out.sample
        if out.block is not None:
            x0 = out.block  # the block as denoise_block records it
    with hooks.stage("context_pass"):
        _call(pipe, batch, text, x0, float(pipe.sampling.context_noise), starts, n, action, offsets)
    seconds = time.perf_counter() - t0
    outputs = []
    for i, st in enumerate(states):
        out = BlockOutput(st.next_block, st.next_frame, x0[i : i + 1], seconds)
        hooks.on_block_end(out)
        st.next_frame, st.next_block = st.next_frame + n, st.next_block + 1
        outputs.append(out)
    return outputs


def _stack_actions(actions: list, device, n: int):
    """The streams' block inputs as one batch: (1, n, A) tensors, or a model's per-block input dataclass of
    tensors (Wan 2.1 I2V's StartImageBlockInput: each stream's cond_concat) stacked field by field."""
    first = actions[0]
    if isinstance(first, torch.Tensor):
        action = torch.cat([to_device_async(a, device) for a in actions])
        if action.shape[:2] != (len(actions), n):
            raise ShapeMismatchError(
                f"batched actions have shape {tuple(action.shape)}; expected ({len(actions)}, {n}, A): "
                "one (1, block_frames, A) tensor per stream"
            )
        return action
    if not dataclasses.is_dataclass(first) or any(type(a) is not type(first) for a in actions):
        raise ConfigError(f"streams batched together need block inputs of one kind; got {type(first).__name__}")
    fields = {}
    for f in dataclasses.fields(first):
        parts = [getattr(a, f.name) for a in actions]
        if not all(isinstance(p, torch.Tensor) for p in parts):
            raise ConfigError(
                f"{type(first).__name__}.{f.name} is not a tensor in every stream; run them one at a time"
            )
        fields[f.name] = torch.cat([p.to(device) for p in parts])
    return type(first)(**fields)


def _call(pipe, batch: BatchedStreamKV, text, x, t: float, starts: list[int], n: int, action, offsets: list[float]):
    """One transformer call over every stream's frames [start_i, start_i + n): x (B, n, C, H, W) → flow. RoPE
    positions per row where the streams' starts or RoPE offsets differ (as `BlockDiffusionPipeline._call`)."""
    batch.begin_each(starts, n)
    timestep = torch.full((len(starts), n), t, dtype=torch.float32, device=pipe.device)
    positions = None
    if any(offsets):
        positions = torch.stack([torch.arange(s, s + n, dtype=torch.float64) + o for s, o in zip(starts, offsets)])
    elif len(set(starts)) > 1:
        positions = torch.stack([torch.arange(s, s + n) for s in starts])
    flow = pipe.model(
        x.permute(0, 2, 1, 3, 4).to(pipe.dtype),
        timestep,
        text,
        batch,
        starts[0],
        action=action,
        frame_positions=positions,
        attn_mask=batch.key_mask,
    )
    return flow.permute(0, 2, 1, 3, 4)
