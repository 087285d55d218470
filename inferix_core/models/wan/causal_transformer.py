"""CausalWanTransformer: the Wan 2.1 DiT run block by block against a KV cache.

Weight-compatible with Wan 2.1 T2V and its causal descendants (Self-Forcing, CausVid, LongLive): the
parameter names are the original Wan names. The forward computes one chunk of latent frames; past
frames are seen only through the KV cache (`inferix_core.cache`), or, with no cache, through an
explicit attention mask over the chunk (full-sequence training and the cache-equivalence tests).
Semantics follow the reference step by step (see tests/fixtures/README.md §1.3–1.4).
"""

from __future__ import annotations

import torch
from torch import nn

from ...attention import get_attention_backend
from ...compile_boundary import compile_boundary, mark_compile_boundaries
from ...errors import BackendUnavailableError, ConfigError, ShapeMismatchError
from ...kernels import register_kernels
from ...kernels.layer_norm_modulate import (
    add_layer_norm_modulate,
    fused_layer_norm_modulate_supported,
    layer_norm_modulate,
)
from ...kernels.qk_norm_rope import fused_qk_norm_rope_supported, qk_norm_rope
from .action_module import ActionInputs, ActionKVCache, ActionModule, MatrixGameBlockInput, action_inputs
from .block_inputs import CrossAttentionCache, StartImageBlockInput
from .config import WanConfig
from .layers import LayerNorm, RMSNorm, RotaryEmbedding3D, apply_rope, sinusoidal_embedding


class _Attention(nn.Module):
    """q/k/v/o projections with optional qk-RMSNorm over the full width, shared by both attentions."""

    def __init__(self, config: WanConfig):
        super().__init__()
        d = config.dim
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm_q = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()
        self.attend = get_attention_backend("sdpa").attend


class SelfAttention(_Attention):
    """Self-attention over the chunk and the KV cache, with Wan's q/k RMSNorm and 3-axis RoPE.

    On CUDA in inference the norms and the rotation of q and k run as one Triton kernel
    (`inferix_core.kernels.qk_norm_rope`, the same roundings); `fused_norm_rope = False` turns it off.
    """

    fused_norm_rope = True

    def forward(self, x, freqs, kv=None, mask=None):
        b, s, _ = x.shape
        v = self.v(x).view(b, s, self.num_heads, self.head_dim)  # (B, L, H, D)
        q, k = self.q(x), self.k(x)
        if self._use_fused_norm_rope(q, k, v, freqs):
            q, k = qk_norm_rope(q, k, self.norm_q.weight, self.norm_k.weight, freqs, self.norm_q.eps)
            q, k = q.view(b, s, self.num_heads, self.head_dim), k.view(b, s, self.num_heads, self.head_dim)
        else:
            q = apply_rope(self.qk_norm(self.norm_q, q).view(b, s, self.num_heads, self.head_dim), freqs, v.dtype)
            k = apply_rope(self.qk_norm(self.norm_k, k).view(b, s, self.num_heads, self.head_dim), freqs, v.dtype)
        out = self.attend_cached(q, k, v, kv, mask)  # (B, L, H, D)
        return self.o(out.flatten(2))

    def _use_fused_norm_rope(self, q, k, v, freqs) -> bool:
        return (
            self.fused_norm_rope
            and q.is_cuda  # first: the rest is never asked on the CPU
            and type(self.norm_q) is RMSNorm
            and type(self.norm_k) is RMSNorm
            and self.norm_q.eps == self.norm_k.eps
            and v.dtype == q.dtype
            and fused_qk_norm_rope_supported(q, k, self.norm_q.weight, self.norm_k.weight, freqs)
        )

    @staticmethod
    def qk_norm(norm: nn.Module, t: torch.Tensor) -> torch.Tensor:
        """The qk-RMSNorm's output as the float32 RoPE rotates: its weight multiply writes float32 itself
        (the values rounded to t's dtype as before), so RoPE needs no cast pass up."""
        return norm(t, out_dtype=torch.float32) if isinstance(norm, RMSNorm) else norm(t)

    @compile_boundary
    def attend_cached(self, q, k, v, kv=None, mask=None):
        """Write this chunk's K/V to the cache and attend to every valid cached token.

        Kept out of `torch.compile` graphs (see `compile_blocks`): the cache is Python state whose
        offsets change every block, and the attended length changes with it; compiling it would
        recompile per block. The math before and after it is what compilation fuses.
        """
        if kv is not None:
            k, v = kv.update(k, v)  # every valid cached token, this chunk's included
        return self.attend(q, k, v, mask)


class CrossAttention(_Attention):
    """Attention to the text (or Matrix-Game's image) context; Wan I2V (`WanI2VCrossAttention`) adds a second
    attention of the same queries to the start image's CLIP tokens, with K/V projections of its own, and sums
    the two before the output projection."""

    def __init__(self, config: WanConfig):
        super().__init__(config)
        if config.has_image_input:
            d = config.dim
            self.k_img, self.v_img = nn.Linear(d, d), nn.Linear(d, d)
            self.norm_k_img = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()

    def context_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = context.shape[0]
        k = self.norm_k(self.k(context)).view(b, -1, self.num_heads, self.head_dim)
        v = self.v(context).view(b, -1, self.num_heads, self.head_dim)
        return k, v

    def image_kv(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of the projected CLIP tokens (B, 257, dim) of a Wan I2V model's start image."""
        b = tokens.shape[0]
        k = self.norm_k_img(self.k_img(tokens)).view(b, -1, self.num_heads, self.head_dim)
        v = self.v_img(tokens).view(b, -1, self.num_heads, self.head_dim)
        return k, v

    def forward(self, x, k, v, k_img=None, v_img=None):
        b = x.shape[0]
        q = self.norm_q(self.q(x)).view(b, -1, self.num_heads, self.head_dim)
        out = self.attend(q, k, v)
        if k_img is not None:
            out = out + self.attend(q, k_img, v_img)
        return self.o(out.flatten(2))


class FeedForward(nn.Sequential):
    """Linear → tanh GELU → Linear, with Wan's keys (`ffn.0`, `ffn.2`).

    On CUDA, in inference with bf16/fp16 weights, the first linear's bias and the GELU run in cuBLASLt's
    GEMM epilogue (`torch._addmm_activation(..., use_gelu=True)`, the tanh GELU, on the fp32 accumulator
    before its one rounding): that removes a read and a write of the (L, ffn_dim) activation, the largest
    tensor of the block, per call. Inductor keeps the op as its own kernel, so it holds in compiled blocks
    too. Elsewhere (the CPU's `_addmm_activation` applies the exact GELU, not Wan's tanh one; training; fp32;
    FP8 linears) the three modules run as written. `gelu_epilogue = False` turns it off.
    """

    def __init__(self, dim: int, ffn_dim: int):
        super().__init__(nn.Linear(dim, ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(ffn_dim, dim))
        self.gelu_epilogue = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = self[0]
        if (
            self.gelu_epilogue
            and x.is_cuda
            and type(up) is nn.Linear
            and up.bias is not None
            and x.dtype in (torch.bfloat16, torch.float16)
            and up.weight.dtype == x.dtype == up.bias.dtype
            and not torch.is_grad_enabled()
        ):
            h = torch._addmm_activation(up.bias, x.reshape(-1, x.shape[-1]), up.weight.t(), use_gelu=True)
            return self[2](h.view(*x.shape[:-1], h.shape[-1]))
        return super().forward(x)


class AttentionBlock(nn.Module):
    def __init__(self, config: WanConfig, index: int = 0):
        super().__init__()
        d = config.dim
        act = config.action_config
        # Matrix-Game 2.0: an ActionModule between the cross-attention and the FFN of the listed blocks
        self.action_model = ActionModule(act, d) if act is not None and index in act.blocks else None
        self.norm1 = LayerNorm(d, config.eps, elementwise_affine=False)
        self.self_attn = SelfAttention(config)
        self.norm3 = LayerNorm(d, config.eps, elementwise_affine=True) if config.cross_attn_norm else nn.Identity()
        self.cross_attn = CrossAttention(config)
        self.norm2 = LayerNorm(d, config.eps, elementwise_affine=False)
        self.ffn = FeedForward(d, config.ffn_dim)
        self.modulation = nn.Parameter(torch.randn(1, 6, d) / d**0.5)

    def forward(self, x, e0, freqs, ctx_k, ctx_v, num_frames, kv=None, mask=None, action: ActionInputs | None = None,
                img_k=None, img_v=None):  # fmt: skip
        # x: (B, F*HW, C); e0: (B, F, 6, C) -> six (B, F, 1, C) rows, one per frame
        mod = self.modulation.unsqueeze(1) + e0
        e = mod.chunk(6, dim=2)
        scale_attn, scale_ffn = (1 + mod[:, :, 1::3]).chunk(2, dim=2)  # 1 + e[1] and 1 + e[4] in one op

        def per_frame(t):  # (B, F*HW, C) -> (B, F, HW, C)
            return t.unflatten(1, (num_frames, -1))

        # modulation x·(1 + scale) + shift and gated residuals x + y·gate: one addcmul each, not mul + add
        fused = self._use_fused_norms(x, e[0], scale_attn)
        if fused:  # CUDA inference: LayerNorm + modulation as one Triton kernel (inferix_core.kernels)
            h = layer_norm_modulate(x, e[0], scale_attn, self.norm1.eps)
        else:
            h = torch.addcmul(e[0], per_frame(self.norm1(x)), scale_attn).flatten(1, 2)
        y = self.self_attn(h, freqs, kv, mask)
        x = torch.addcmul(per_frame(x), per_frame(y), e[2]).flatten(1, 2)
        y = self.cross_attn(self.norm3(x), ctx_k, ctx_v, img_k, img_v)
        if fused and self.action_model is None and fused_layer_norm_modulate_supported(x, e[3], scale_ffn, y):
            # the residual add, norm2 and its modulation in one kernel
            x, h = add_layer_norm_modulate(x, y, e[3], scale_ffn, self.norm2.eps)
        else:
            x = x + y
            if self.action_model is not None:
                x = self.action_model(x, action)  # its own residuals, neither gated nor modulated
            if fused and fused_layer_norm_modulate_supported(x, e[3], scale_ffn):
                h = layer_norm_modulate(x, e[3], scale_ffn, self.norm2.eps)
            else:
                h = torch.addcmul(e[3], per_frame(self.norm2(x)), scale_ffn).flatten(1, 2)
        y = self.ffn(h)
        return torch.addcmul(per_frame(x), per_frame(y), e[5]).flatten(1, 2)

    fused_norms = True  # False: the norms and modulations run as the modules (Inductor fuses them when compiled)

    def _use_fused_norms(self, x, shift, scale) -> bool:
        return (
            self.fused_norms
            and x.is_cuda  # first: the rest is never asked on the CPU
            and all(
                type(n) is LayerNorm and n.weight is None and n.bias is None and n.eps == self.norm1.eps
                for n in (self.norm1, self.norm2)
            )
            and fused_layer_norm_modulate_supported(x, shift, scale)
        )


class ImageProjection(nn.Module):
    """Wan's MLPProj over CLIP tokens: LayerNorm → Linear → GELU (exact) → Linear → LayerNorm, eps 1e-5."""

    def __init__(self, clip_dim: int, dim: int):
        super().__init__()
        self.proj = nn.Sequential(
            LayerNorm(clip_dim, eps=1e-5),
            nn.Linear(clip_dim, clip_dim),
            nn.GELU(),
            nn.Linear(clip_dim, dim),
            LayerNorm(dim, eps=1e-5),
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(tokens)


class Head(nn.Module):
    def __init__(self, config: WanConfig):
        super().__init__()
        d = config.dim
        out = config.out_dim * config.patch_size[0] * config.patch_size[1] * config.patch_size[2]
        self.norm = LayerNorm(d, config.eps, elementwise_affine=False)
        self.head = nn.Linear(d, out)
        self.modulation = nn.Parameter(torch.randn(1, 2, d) / d**0.5)

    def forward(self, x, e, num_frames):
        # x: (B, F*HW, C); e: (B, F, 1, C), the time embedding (not the 6-way projection)
        shift, scale = (self.modulation.unsqueeze(1) + e).chunk(2, dim=2)
        return self.head(
            torch.addcmul(shift, self.norm(x).unflatten(1, (num_frames, -1)), 1 + scale)
        )  # (B, F, HW, out)


class CausalWanTransformer(nn.Module):
    """Wan 2.1 transformer computing one chunk of frames at a time against a KV cache."""

    # The residual stream token-major, (B, L, D) contiguous: the patch embedding's (B, D, L) output transposed is
    # not, and the blocks' elementwise ops keep their input's layout, so without the copy every block reads its
    # norms' rows with a stride of L and the fused norm kernels (inferix_core.kernels) cannot take them.
    row_major_stream = True

    def __init__(self, config: WanConfig):
        super().__init__()
        self.config = config
        d = config.dim
        # 1. patch + text + time (+ action) embeddings
        self.patch_embedding = nn.Conv3d(config.in_dim, d, kernel_size=config.patch_size, stride=config.patch_size)
        if config.image_context:  # Matrix-Game 2.0: projected CLIP tokens instead of text
            self.img_emb = ImageProjection(config.clip_dim, d)
        else:
            self.text_embedding = nn.Sequential(
                nn.Linear(config.text_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d)
            )
            if config.has_image_input:  # Wan 2.1 I2V: the start image's CLIP tokens beside the text
                self.img_emb = ImageProjection(config.clip_dim, d)
        self.time_embedding = nn.Sequential(nn.Linear(config.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        if config.action_dim:
            self.action_embedding = nn.Sequential(nn.Linear(config.action_dim, d), nn.SiLU(), nn.Linear(d, d))
        # 2. transformer blocks
        self.blocks = nn.ModuleList(AttentionBlock(config, i) for i in range(config.num_layers))
        # 3. output head
        self.head = Head(config)
        self.rope = RotaryEmbedding3D(config.head_dim)
        # tokens split across ranks (inferix_core.parallel.SequenceParallel) or None; see forward steps 3–5
        self.sequence_parallel = None

    # -- text ----------------------------------------------------------------------------------------
    def embed_text(self, context: torch.Tensor) -> torch.Tensor:
        """(B, L, text_dim) -> (B, text_len, dim); shorter contexts are zero-padded to text_len."""
        if context.shape[1] < self.config.text_len:
            pad = context.new_zeros(context.shape[0], self.config.text_len - context.shape[1], context.shape[2])
            context = torch.cat([context, pad], dim=1)
        return self.text_embedding(context)

    def prepare_context(
        self,
        context: torch.Tensor,
        image_tokens: torch.Tensor | None = None,
        *,
        keep_image_of: CrossAttentionCache | None = None,
    ) -> CrossAttentionCache:
        """Compute every layer's cross-attention K/V once: for a prompt embedding (B, L, text_dim), or for
        image-context models the CLIP tokens (B, L, clip_dim) of the start image.

        Wan 2.1 I2V models take both: the prompt as `context` and the start image's CLIP tokens (B, 257,
        clip_dim) as `image_tokens`; a prompt switch passes `keep_image_of=` the current cache instead, so the
        image's K/V are reused.
        """
        cfg, dtype = self.config, self.patch_embedding.weight.dtype
        context = context.to(dtype)
        ctx = self.img_emb(context) if cfg.image_context else self.embed_text(context)
        kvs = [block.cross_attn.context_kv(ctx) for block in self.blocks]
        cache = CrossAttentionCache([k for k, _ in kvs], [v for _, v in kvs])
        if not cfg.has_image_input:
            if image_tokens is not None:
                raise ConfigError("this model takes no CLIP image tokens beside its context; drop image_tokens")
            return cache
        if image_tokens is not None:
            if image_tokens.dim() != 3 or image_tokens.shape[-1] != cfg.clip_dim:
                raise ShapeMismatchError(
                    f"CLIP image tokens have shape {tuple(image_tokens.shape)}; expected (B, 257, {cfg.clip_dim})"
                )
            tokens = self.img_emb(image_tokens.to(dtype))
            ikv = [block.cross_attn.image_kv(tokens) for block in self.blocks]
            cache.image_keys, cache.image_values = [k for k, _ in ikv], [v for _, v in ikv]
        elif keep_image_of is not None and keep_image_of.image_keys is not None:
            cache.image_keys, cache.image_values = keep_image_of.image_keys, keep_image_of.image_values
        else:
            raise ConfigError(
                "this Wan I2V model cross-attends to its start image as well as the prompt: give the image's CLIP "
                "vision tokens (clip_vision_h, 257 tokens) with the prompt"
            )
        return cache

    def extend_kv_cache(self, cache, cache_config, spec):
        """The cache a pipeline should use: `cache` itself, or with Matrix-Game's action caches around it."""
        if self.config.action_config is None:
            return cache
        return ActionKVCache.build(cache, cache_config, spec, self.config.action_config)

    # -- forward -------------------------------------------------------------------------------------
    def chunk_freqs(
        self,
        grid: tuple[int, int, int],
        start_frame: int = 0,
        frame_positions: torch.Tensor | None = None,
        device: torch.device | str = "cpu",
    ) -> torch.Tensor:
        """RoPE table of a chunk whose patch grid is (f, h, w), at frames start_frame.. (or frame_positions:
        (F,), or (B, F) for batched streams at different positions: one table per row)."""
        if frame_positions is None:
            frame_positions = torch.arange(start_frame, start_frame + grid[0], device="cpu")
        if frame_positions.dim() == 2:
            return torch.stack(
                [self.rope.freqs(row, grid[1], grid[2], torch.device(device)) for row in frame_positions]
            )
        return self.rope.freqs(frame_positions, grid[1], grid[2], torch.device(device))

    def patch_grid(self, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
        """(f, h, w) patch grid of latents (B, C, F, H, W)."""
        pt, ph, pw = self.config.patch_size
        return latent_shape[2] // pt, latent_shape[3] // ph, latent_shape[4] // pw

    def forward(
        self,
        x: torch.Tensor,
        timestep: torch.Tensor,
        context: torch.Tensor | CrossAttentionCache,
        kv_cache=None,
        start_frame: int = 0,
        action: torch.Tensor | None = None,
        frame_positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        rope_freqs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Flow prediction for a chunk.

        Args:
            x: (B, C_in, F, H, W) latents.
            timestep: (B, F) per-frame timesteps (float).
            context: text embedding (B, L, text_dim) or a prepared CrossAttentionCache.
            kv_cache: cache whose `begin(start_frame, F)` the caller has run, or None (attend within x).
            start_frame: absolute index of the chunk's first latent frame (RoPE temporal position).
            action: (B, F, action_dim) for the bundled model's action embedding; for Matrix-Game models a
                MatrixGameBlockInput (cond_concat slice + action rows) whose cond_concat is concatenated to x;
                for Wan 2.1 I2V models a StartImageBlockInput (the chunk's cond_concat), concatenated the same way.
            frame_positions: (F,) explicit temporal positions (teacher forcing); default start_frame + arange(F);
                or (B, F), one row per batch item (batched streams at different positions, cache/shared.py).
            attn_mask: (L, L) boolean mask over x's tokens when kv_cache is None; with a cache, an optional
                (B, 1, 1, L_span) key mask over the attended span (batched streams whose spans were padded).
            rope_freqs: this chunk's RoPE table (`chunk_freqs`) computed by the caller; a CUDA graph passes a
                static copy so that the replayed call builds nothing on the host (models/wan/cuda_graphs.py).
        Returns:
            (B, C_out, F, H, W) flow (noise − x0).
        """
        cfg = self.config
        b, _, num_frames, _height, _width = x.shape
        pt, ph, pw = cfg.patch_size
        if isinstance(context, torch.Tensor):
            context = self.prepare_context(context)
        game = None
        if cfg.has_image_input:  # Wan 2.1 I2V: [noise (16) ; mask (4) ; image latent (16)], text + image context
            if not isinstance(action, StartImageBlockInput):
                raise ConfigError(
                    "this Wan I2V model needs action=StartImageBlockInput(cond_concat) of the start image"
                )
            if context.image_keys is None:
                raise ConfigError("this Wan I2V model needs the start image's K/V: prepare_context(text, image_tokens)")
            x = torch.cat([x, action.cond_concat.to(x.dtype)], dim=1)
            action = None
        elif isinstance(action, StartImageBlockInput):
            raise ConfigError("start-image conditioning was given but this model has no image input (in_dim 16)")
        if isinstance(action, MatrixGameBlockInput):
            if cfg.action_config is None:
                raise ConfigError("Matrix-Game conditioning was given but this model has no action modules")
            game, action = action, None
            x = torch.cat([x, game.cond_concat.to(x.dtype)], dim=1)  # [noise (16) ; mask (4) ; image latent (16)]
        elif cfg.action_config is not None:
            raise ConfigError("this Matrix-Game model needs action=MatrixGameBlockInput(cond_concat, keyboard, mouse)")
        if game is not None and kv_cache is not None and not hasattr(kv_cache, "action_views"):
            raise ConfigError("Matrix-Game needs its action caches: pass model.extend_kv_cache(cache, config, spec)")
        # 1. patchify: (B, C, F, H, W) -> (B, F*h*w, dim) in (f, h, w) order
        x = self.patch_embedding(x.to(self.patch_embedding.weight.dtype))
        grid = x.shape[2:]  # (f, h, w)
        x = x.flatten(2).transpose(1, 2)
        if self.row_major_stream:  # one copy; otherwise every block's output keeps this transposed layout
            x = x.contiguous()
        # 2. time (+ action) embedding, one row per frame
        e = self.time_embedding(sinusoidal_embedding(cfg.freq_dim, timestep.flatten()).type_as(x))  # (B*F, dim)
        if action is not None:
            if not cfg.action_dim:
                raise ValueError("this model has no action input; pass action=None")
            e = e + self.action_embedding(action.reshape(b * num_frames, -1).type_as(x))
        e0 = self.time_projection(e).unflatten(1, (6, cfg.dim)).unflatten(0, timestep.shape)  # (B, F, 6, dim)
        # 3. RoPE rotations for this chunk's absolute positions
        freqs = rope_freqs if rope_freqs is not None else self.chunk_freqs(grid, start_frame, frame_positions, x.device)
        sp = self.sequence_parallel
        if sp is not None and freqs.dim() == 5:
            raise BackendUnavailableError("sequence parallelism does not run batched streams at different positions")
        if sp is not None:  # keep this rank's tokens of every frame; the cache then stores H/N heads
            if game is not None:
                raise BackendUnavailableError("sequence parallelism does not split Matrix-Game's action modules yet")
            x, freqs, kv_cache = sp.shard(self, x, freqs, grid, kv_cache)
        # 4. blocks (action windows and RoPE built once per call, here, outside the compiled blocks)
        actions: ActionInputs | None = None
        if game is not None:
            actions = action_inputs(cfg.action_config, game.keyboard, game.mouse, start_frame, grid[0],
                                    grid[1] * grid[2], x.dtype)  # fmt: skip
        for i, block in enumerate(self.blocks):
            kv = kv_cache.layer(i) if kv_cache is not None else None
            act = None
            if actions is not None and block.action_model is not None:
                mouse_kv, keyboard_kv = kv_cache.action_views(i) if kv_cache is not None else (None, None)
                act = actions._replace(mouse_kv=mouse_kv, keyboard_kv=keyboard_kv)
            img = (context.image_keys[i], context.image_values[i]) if context.image_keys is not None else ()
            x = block(x, e0, freqs, context.keys[i], context.values[i], grid[0], kv, attn_mask, act, *img)
        # 5. head + unpatchify: feature j = ((p*ph + q)*pw + r)*C_out + c lands at (c, f*pt+p, h*ph+q, w*pw+r)
        out = self.head(x, e.unflatten(0, timestep.shape).unsqueeze(2), grid[0])  # (B, F, hw, out)
        if sp is not None:
            out = sp.gather(out, grid)  # every rank gets the whole chunk back
        out = out.view(b, *grid, pt, ph, pw, cfg.out_dim)
        out = torch.einsum("bfhwpqrc->bcfphqwr", out)
        return out.reshape(b, cfg.out_dim, grid[0] * pt, grid[1] * ph, grid[2] * pw)


# Inductor options of `compile_blocks` when no mode is given (torch.compile takes one or the other)
BLOCK_INDUCTOR_OPTIONS: dict[str, object] = {}


def compile_blocks(model: CausalWanTransformer, mode: str | None = None) -> CausalWanTransformer:
    """Regional compilation: compile each transformer block in place with `torch.compile`.

    Why: at 480×832 on an H200, 45 % of the eager kernel time (1.34 of 2.97 s per 81 frames) is
    elementwise passes (fp32 norms, modulation, RoPE, gated residuals), each a separate kernel reading
    and writing the whole activation; Inductor fuses them into a few kernels (0.34 s). All blocks share one compiled graph (the
    parameters are graph inputs), so the cold start is one block's compile, not thirty. The KV-cache
    step (`SelfAttention.attend_cached`) stays eager. Numerics: the same formulas in the same
    precisions; fused reductions may round differently (bf16-level on GPU, ~1e-6 in fp32).
    """
    mark_compile_boundaries()  # attend_cached and the attention backends' host-side steps stay eager
    register_kernels()  # the fused norm kernels' torch ops, defined before the first trace (not at import)
    options = dict(BLOCK_INDUCTOR_OPTIONS) if mode is None and BLOCK_INDUCTOR_OPTIONS else None
    for block in model.blocks:
        block.compile(mode=mode, dynamic=False, options=options)
    model.compile_mode = mode or "default"  # read by the CUDA-graph runner (its own graphs clash with cudagraph modes)
    return model
