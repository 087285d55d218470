"""The block-diffusion loop: denoise a block of latent frames in a few steps, then write it to the cache.

For each block of `block_frames` latent frames (Self-Forcing pipeline/causal_inference.py, in words in
tests/fixtures/README.md §1.5):
  1. x ← noise for the block;
  2. for each timestep t_s: flow = model(x, t_s), then the scheduler's step (FlowMatchScheduler.step):
     x0 = x − σ(t_s)·flow (float64), and unless last, x ← (1 − σ')·x0 + σ'·n with fresh noise n and
     σ' = σ(t_{s+1});
  3. the block's output is the last x0;
  4. context pass: model(x0, t = context_noise) overwrites the block's K/V with clean-context values.
The loop yields each clean block as soon as it exists, so decoding and streaming can start at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import torch

from ..cache import KVCacheConfig, KVCacheSpec, create_kv_cache
from ..cache.zero_keys import ZeroKeysView, padding_keys_attended
from ..errors import ConfigError, ShapeMismatchError
from ..parallel import head_shards, maybe_enable_sequence_parallel
from ..scheduler import FlowMatchScheduler, SamplingConfig, make_scheduler
from ..tensors import to_device_async
from .frames import check_clean_prefix
from .graphs import graph_runner
from .loop import stream_request
from .recache import recache, recache_window
from .types import (
    BlockOutput,
    DeferredContextPass,
    FirstFrameEncoder,
    GenerationRequest,
    PipelineHooks,
    SeededNoise,
    StreamState,
)

log = logging.getLogger(__name__)


class BlockDiffusionPipeline:
    """Runs a causal transformer block by block against a KV cache.

    `first_frame_encoder` is needed by a KV recompute with `keep_first_frame=False` (Krea's default) and
    refused otherwise, so it never changes a run silently.
    """

    def __init__(
        self,
        model,
        sampling: SamplingConfig,
        cache_config: KVCacheConfig | None = None,
        first_frame_encoder: FirstFrameEncoder | None = None,
    ):
        reencodes = bool(sampling.kv_recompute_frames) and not sampling.keep_first_frame
        if reencodes and first_frame_encoder is None:
            raise ConfigError(
                "keep_first_frame=False (Krea's default) re-encodes the oldest decoded frame as the first KV "
                "context frame and needs the Wan VAE in the loop: pass first_frame_encoder=PixelWindowEncoder(vae, "
                "K), load a VAE, or set keep_first_frame=True to keep the first latent frame"
            )
        if first_frame_encoder is not None and not reencodes:
            raise ConfigError("first_frame_encoder is only used by kv_recompute_frames > 0 with keep_first_frame=False")
        self.first_frame_encoder = first_frame_encoder
        self.model = model
        maybe_enable_sequence_parallel(model)  # under torchrun: tokens split across ranks (docs/parallel.md)
        self.sampling = sampling
        self.cache_config = cache_config or KVCacheConfig()
        self.cache_config.check_block(sampling.block_frames)
        self.schedule = make_scheduler(sampling)  # begin(block) -> the block's solve, the same for every solver
        # read-only views of the schedule for tests and benchmarks (the flow-match tables, its σ and timesteps)
        self.scheduler = getattr(self.schedule, "scheduler", None) or FlowMatchScheduler(
            sampling.shift, sampling.num_train_timesteps
        )
        self.timesteps, self.sigmas = self.schedule.timesteps, self.schedule.sigmas
        self.first_timesteps = self.schedule.begin(0).timesteps
        self.kv_cache = None  # the last run's cache (for inspection and tests)
        self.stream_state: StreamState | None = None  # the last stream()'s state and re-cache history
        self.stream_history: list = []

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def check_request(self, req: GenerationRequest) -> None:
        """Refuse a request this model cannot run (sizes, conditioning width, actions), before any model work."""
        cfg = self.model.config
        cfg.frame_tokens(req.latent_height, req.latent_width)  # raises if not divisible by the patch
        if req.num_blocks < 1:
            raise ConfigError(f"num_blocks must be >= 1, got {req.num_blocks}")
        if req.context.dim() != 3 or req.context.shape[-1] != cfg.context_dim:
            what = "image tokens" if cfg.image_context else "prompt embedding"
            raise ShapeMismatchError(
                f"{what} have shape {tuple(req.context.shape)}; expected (B, L, {cfg.context_dim})"
            )
        image_started = cfg.in_dim == 2 * cfg.out_dim + 4  # I2V: per-block inputs (image_world) come as `action`
        if req.actions is not None and not (cfg.action_dim or cfg.action_config) and not image_started:
            raise ConfigError("actions were given but this model has no action input")

    def generate(self, request: GenerationRequest, hooks: PipelineHooks | None = None) -> torch.Tensor:
        """Run every block and return the latents (B, F, C, H, W)."""
        return torch.cat([out.latents for out in self.stream(request, hooks)], dim=1)

    @torch.no_grad()
    def stream(self, request: GenerationRequest, hooks: PipelineHooks | None = None) -> Iterator[BlockOutput]:
        """The request's blocks, headless: the one block body (`loop.advance`) per block (pipeline/loop.py).

        Each block is handed out before its context pass, which runs when the consumer asks for the next block
        (or calls `settle()`): every later call sees the cache written (DeferredContextPass)."""
        return stream_request(self, request, hooks or PipelineHooks())

    def settle(self, state: StreamState | None = None) -> None:
        """Write the K/V of the block `stream()` handed out last, if its context pass is still pending.

        stream() runs it when the next block is asked for; call this to read or save the cache in between
        (`pipe.kv_cache`, a world-state capture). Without `final_context_pass`, the last block's stays pending.
        """
        state = state if state is not None else self.stream_state
        pending = None if state is None else state.pending_context
        if pending is not None:
            state.pending_context = None
            self._context_pass_of(state, pending)

    def _context_pass_of(self, state: StreamState, pending: DeferredContextPass) -> None:
        """Run a block's context pass with what was in force when the block was made."""
        text, state.text = state.text, pending.text  # the block's own prompt, whatever was switched since
        try:
            pending.hooks.on_context_pass(pending.index)
            with pending.hooks.stage("context_pass"):
                self.context_pass(state, pending.latents, pending.start_frame, pending.action)
        finally:
            state.text = text
        if pending.new_shot and self.sampling.shot_sinks:
            self._pin_shot(state, pending.start_frame, pending.latents.shape[1])

    # -- the per-block body, shared with the interactive session (inferix_core/clients/session.py) ----------
    def start_stream(
        self,
        context: torch.Tensor,
        latent_height: int,
        latent_width: int,
        *,
        batch_size: int = 1,
        noise: SeededNoise | object | None = None,
        seed: int = 0,
        max_frames: int | None = None,
        image_context: torch.Tensor | None = None,
    ) -> StreamState:
        """Plan a fresh KV cache and encode the prompt: the state `denoise_block` advances.

        Args:
            context: (B, L, text_dim) prompt embedding.
            noise: anything with initial() and step(); default per-block draws from SeededNoise(seed).
            max_frames: the run's length when known (sizes a global cache; open-ended streams grow it).
            image_context: a Wan 2.1 I2V model's start-image CLIP tokens (B, 257, clip_dim), beside the prompt.
        """
        cfg = self.model.config
        if self.sampling.kv_recompute_frames:  # the cache never holds more than K context frames + one block
            max_frames = self.sampling.kv_recompute_frames + self.sampling.block_frames
        spec = KVCacheSpec(
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads // head_shards(self.model),  # each rank caches its own heads
            head_dim=cfg.head_dim,
            frame_tokens=cfg.frame_tokens(latent_height, latent_width),
            block_frames=self.sampling.block_frames,
            batch_size=batch_size,
            dtype=self.dtype,
            device=self.device,
            max_frames=max_frames,
        )
        # release the previous run's cache (and the state that holds it) before allocating the next one
        self.kv_cache, self.stream_state, self.stream_history = None, None, []
        shots = {"shot_sinks": True} if self.sampling.shot_sinks else {}  # a cache that can pin (cache/shots.py)
        graphs = None if shots else graph_runner(self.model)  # models/wan/cuda_graphs.py: keeps one cache across runs
        base = (
            graphs.kv_cache(self.cache_config, spec)
            if graphs is not None
            else create_kv_cache(self.cache_config, spec, **shots)
        )
        cache = base
        extend = getattr(self.model, "extend_kv_cache", None)  # models with caches of their own (action modules)
        if extend is not None:
            cache = extend(cache, self.cache_config, spec)
        self.kv_cache = cache
        if self.first_frame_encoder is not None:
            self.first_frame_encoder.reset()
        image = None if image_context is None else to_device_async(image_context, self.device)
        text = self.model.prepare_context(to_device_async(context, self.device), *(() if image is None else (image,)))
        state = StreamState(
            cache, text, noise if noise is not None else SeededNoise(seed), latent_height, latent_width, batch_size
        )
        self.lease_cache(state, base)
        return state

    def lease_cache(self, state: StreamState, cache=None) -> None:
        """Mark `state`'s KV cache as in use while `state` lives (a CUDA-graph runner reuses it only after).

        `start_stream` does this; whoever builds another StreamState around the same cache (a world-state
        restore) calls it again for the new state.
        """
        graphs = graph_runner(self.model)
        if graphs is not None:
            base = cache if cache is not None else getattr(state.cache, "main", state.cache)  # ActionKVCache.main
            graphs.lease(base, state)

    def set_prompt(self, state: StreamState, context: torch.Tensor) -> None:
        """Swap the cross-attention K/V for a new prompt (B, L, text_dim); cached self-attention K/V stay."""
        if getattr(state.text, "image_keys", None) is not None:  # Wan I2V: the start image's K/V stay
            state.text = self.model.prepare_context(to_device_async(context, self.device), keep_image_of=state.text)
        else:
            state.text = self.model.prepare_context(to_device_async(context, self.device))

    def recache_window(self, state: StreamState, blocks: list[tuple[int, torch.Tensor, torch.Tensor | None]]) -> int:
        """LongLive's KV re-cache under the prompt now in `state` (`recache.recache_window`)."""
        return recache_window(self, state, blocks)

    def recache(self, state: StreamState, blocks: list, style: str) -> int:
        """Re-write the resident frames' K/V under the prompt now in `state`, "window" or "blocks" (pipeline/recache.py)."""
        return recache(self, state, blocks, style)

    def context_pass(
        self, state: StreamState, latents: torch.Tensor, start_frame: int, action: torch.Tensor | None = None
    ) -> None:
        """Write clean latents (B, n, C, H, W) at `start_frame` into the cache (t = context_noise)."""
        self._call(state, latents, float(self.sampling.context_noise), start_frame, latents.shape[1], action)

    @torch.no_grad()
    def denoise_block(
        self,
        state: StreamState,
        action: torch.Tensor | None = None,
        hooks: PipelineHooks | None = None,
        context: torch.Tensor | None = None,
        new_shot: bool = False,
        defer_context_pass: bool = False,
    ) -> BlockOutput:
        """Generate the next block at `state.next_frame`, write its clean K/V, and advance the state.

        Args:
            action: (B, block_frames, action_dim) for action-conditioned models, used by every call of the block.
            context: a new prompt embedding from this block on (a hard switch: cached K/V are kept).
            new_shot: the block starts a new shot (LongLive 2.0, NVlabs/LongLive main
                pipeline/causal_diffusion_inference.py): RoPE positions from this block on get one more
                `shot_rope_offset`, and with `shot_sinks` the block's first frames are pinned after its
                context pass (their `_pin_current_chunk`; cache/shots.py).
            defer_context_pass: leave the block's K/V write pending in the state, for the caller to decode
                first and then `settle(state)`. A pass still pending from the previous block runs first,
                inside this block's span.
        """
        hooks = hooks or PipelineHooks()
        cfg, n = self.model.config, self.sampling.block_frames
        index, start = state.next_block, state.next_frame
        shape = (state.batch_size, n, cfg.out_dim, state.latent_height, state.latent_width)
        t0 = time.perf_counter()
        hooks.on_block_start(index, start)
        self.settle(state)
        if context is not None:
            self.set_prompt(state, context)
        if new_shot:
            state.shot_index += 1
            if self.sampling.shot_rope_offset:
                state.rope_offset = state.shot_index * self.sampling.shot_rope_offset
        x = to_device_async(state.noise.initial(index * n, shape).float(), self.device)

        def renoise(step: int) -> torch.Tensor:
            return to_device_async(state.noise.step(index, step, shape), self.device)

        prefix, state.clean_prefix = check_clean_prefix(state.clean_prefix, shape), None
        if prefix is not None:
            prefix = to_device_async(prefix, self.device)
        clean = 0 if prefix is None else prefix.shape[1]
        position = start  # where the block sits for RoPE and the cache
        if self.sampling.kv_recompute_frames:
            with hooks.stage("kv_recompute"):
                position = self.recompute_cache(state)
        solve = self.schedule.begin(index)
        for s, t in enumerate(solve.timesteps.tolist()):
            hooks.check_interrupt()
            with hooks.stage("denoise"):
                if prefix is not None:  # the clean frames go in at t = 0 and come out unchanged
                    x[:, :clean] = prefix
                flow = self._call(state, x, t, position, n, action, clean_frames=clean)
                out = solve.step(flow.float(), x, renoise)
                x0, x = out.x0, out.sample
                if prefix is not None:
                    x0[:, :clean] = prefix
            hooks.on_step(index, s, x0)
            if out.block is not None:  # the last step: the block as the reference records it
                x0 = out.block
                if prefix is not None:
                    x0[:, :clean] = prefix
        pending: DeferredContextPass | None = None
        if self.sampling.kv_recompute_frames:
            if self.first_frame_encoder is not None:  # keep_first_frame=False: the block's pixels, for the re-encode
                with hooks.stage("decode"):
                    self.first_frame_encoder.observe(x0)
            self._remember(state, x0)  # the next block's recompute rewrites the cache: no context pass
        else:
            # context pass: rewrite this block's K/V from the clean x0 (now, or when the stream asks for more)
            pending = DeferredContextPass(hooks, index, x0, start, action, state.text, new_shot)
        out = BlockOutput(index, start, x0, time.perf_counter() - t0)
        if pending is not None and defer_context_pass:
            state.pending_context = pending
        elif pending is not None:
            self._context_pass_of(state, pending)
        hooks.on_block_end(out)
        state.next_frame, state.next_block = start + n, index + 1
        return out

    # -- Krea's KV recompute (SamplingConfig.kv_recompute_frames) -------------------------------------
    def recompute_context(self, state: StreamState) -> torch.Tensor | None:
        """The clean frames the cache is rebuilt from: the first latent frame, then the newest K − 1 after it.

        With `keep_first_frame=False`, once `(block − 1)·block_frames ≥ K` the first frame is instead the
        oldest decoded pixel frame still kept, encoded alone (krea-ai/realtime-video release_server.py
        `get_clean_context_frames`, lines 563-576; `FirstFrameEncoder`).
        """
        if state.first_latent is None:
            return None
        k = self.sampling.kv_recompute_frames
        first = state.first_latent
        rolled = (state.next_block - 1) * self.sampling.block_frames >= k
        if self.first_frame_encoder is not None and rolled:
            first = self.first_frame_encoder.encode_oldest().to(state.first_latent.device, state.first_latent.dtype)
        parts = [first]
        if k > 1 and state.recent_latents is not None:
            parts.append(state.recent_latents[:, -(k - 1) :])
        return torch.cat(parts, dim=1)

    def recompute_cache(self, state: StreamState) -> int:
        """Rebuild the cache from `recompute_context` at positions 0..L−1; returns L, the next block's position.

        As krea-ai/realtime-video `recompute_kv_cache`: a fresh cache, one call over the context frames at
        t = 0 under a block-causal mask that starts at context frame 0 — written here as consecutive
        context passes of `block_frames` frames each (a pass attends to the passes before it and itself).
        """
        state.cache.reset()
        context = self.recompute_context(state)
        if context is None:
            return 0
        n, length, frame_tokens = self.sampling.block_frames, context.shape[1], state.cache.spec.frame_tokens
        for a in range(0, length, n):
            chunk = context[:, a : a + n]
            pad = padding_keys_attended(length, a, n, frame_tokens)  # their flex mask's zero keys (cache/zero_keys)
            cache = ZeroKeysView(state.cache, pad) if pad else None
            self._call(state, chunk, 0.0, a, chunk.shape[1], None, cache=cache)
        return length

    @staticmethod
    def _pin_shot(state: StreamState, start: int, num_frames: int) -> None:
        """Pin the shot's first block in the cache; a global cache evicts nothing, so it has nothing to pin."""
        pin = getattr(state.cache, "pin_shot", None)
        if pin is not None:
            pin(start, num_frames)
        elif not state.cache.config.is_global:
            raise ConfigError(f"this KV cache ({type(state.cache).__name__}) cannot pin shot sinks")

    def _remember(self, state: StreamState, x0: torch.Tensor) -> None:
        k = self.sampling.kv_recompute_frames
        if state.first_latent is None:
            state.first_latent, x0 = x0[:, :1], x0[:, 1:]
        if k > 1:
            recent = x0 if state.recent_latents is None else torch.cat([state.recent_latents, x0], dim=1)
            state.recent_latents = recent[:, -(k - 1) :]

    def _call(
        self,
        state: StreamState,
        x: torch.Tensor,
        t: float,
        start: int,
        num_frames: int,
        action: torch.Tensor | None,
        clean_frames: int = 0,
        cache=None,
    ) -> torch.Tensor:
        """One transformer call over frames [start, start + num_frames): x (B, nf, C, H, W) → flow, same layout.

        Timesteps are per frame: the first `clean_frames` frames get t = 0 (Wan 2.2 TI2V's per-token mask).
        """
        eager = cache is not None  # a view for this one call (Krea's recompute padding): never a captured graph
        cache = state.cache if cache is None else cache
        cache.begin(start, num_frames)
        timestep = torch.full((state.batch_size, num_frames), t, dtype=torch.float32, device=self.device)
        timestep[:, :clean_frames] = 0.0
        if isinstance(action, torch.Tensor):
            action = to_device_async(action, self.device)
        elif action is not None:  # per-block inputs of image-started models (MatrixGameBlockInput, from image_world)
            action = action.to(self.device)
        extra = {}
        if state.rope_offset:  # LongLive 2.0 shots: positions start + i + offset (their compute_temporal_freqs)
            positions = torch.arange(start, start + num_frames, dtype=torch.float64) + state.rope_offset
            extra["frame_positions"] = positions
        # captured whole calls (enable_cuda_graphs), else eager; shot sinks pin frames the graphs do not key on
        graphs = None if self.sampling.shot_sinks or eager else graph_runner(self.model)
        flow = (graphs or self.model)(
            x.permute(0, 2, 1, 3, 4).to(self.dtype), timestep, state.text, cache, start, action=action, **extra
        )
        return flow.permute(0, 2, 1, 3, 4)  # (B, nf, C, H, W)

    def actions_for(self, request: GenerationRequest, start: int, num_frames: int) -> torch.Tensor | None:
        if request.actions is None:
            return None
        if hasattr(request.actions, "for_block"):  # block conditioning (Matrix-Game): the object slices itself
            return request.actions.for_block(start, num_frames).to(self.device, self.dtype)
        if callable(request.actions):
            act = request.actions(start, num_frames)
            if not isinstance(act, torch.Tensor):  # a model's own per-block inputs: it checks them itself
                return act
        else:
            act = request.actions[:, start : start + num_frames]
        if act.shape[1] != num_frames:
            raise ShapeMismatchError(
                f"actions cover {act.shape[1]} frames at frame {start}; expected {num_frames}. "
                "Give one action row per latent frame."
            )
        return to_device_async(act, self.device)
