"""Model families: which checkpoint runs with which sampling defaults, in one table.

Causal Wan families share one architecture and differ in how they sample (steps, warping, shift,
window, sink). Weights cannot tell them apart, so the family is picked by name (argument, file-name
hint, or the bundled model's config) and defaults to Self-Forcing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..cache import KVCacheConfig
from ..errors import ConfigError, MissingFileError
from ..pipeline import SamplingConfig
from .fp8 import count_fp8_linears, quantize_linears_fp8
from .wan.causal_transformer import CausalWanTransformer
from .wan.config import WanConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    sampling: SamplingConfig
    cache: KVCacheConfig
    fps: int = 16


FAMILIES: dict[str, Family] = {
    "self_forcing": Family(
        "self_forcing",
        "Self-Forcing (Wan 2.1 T2V 1.3B, 4 steps per 3-frame block, global attention)",
        SamplingConfig((1000, 750, 500, 250), warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(),
    ),
    "longlive": Family(
        "longlive",
        "LongLive (Self-Forcing lineage tuned for long streams: 12-frame window with a 3-frame sink)",
        SamplingConfig((1000, 750, 500, 250), warp_denoising_steps=True, shift=5.0, block_frames=3),
        KVCacheConfig(window_frames=12, sink_frames=3),
    ),
    "causvid": Family(
        "causvid",
        "CausVid (3-step DMD causal Wan; step list from the authors' DMD config, not warped)",
        SamplingConfig((1000, 757, 522), warp_denoising_steps=False, shift=5.0, block_frames=3),
        KVCacheConfig(),
    ),
    "bundled": Family(
        "bundled",
        "Inferix bundled toy world model (action-conditioned, CPU-sized)",
        SamplingConfig(),
        KVCacheConfig(),
    ),
}


def list_families() -> list[str]:
    return list(FAMILIES)


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family '{name}'; expected one of {list_families()}")
    return FAMILIES[name]


@dataclass(frozen=True)
class WorldModel:
    """An immutable handle on everything one stream needs: transformer, decoders, text conditioning."""

    family: str
    config: WanConfig
    sampling: SamplingConfig
    default_cache: KVCacheConfig
    transformer: CausalWanTransformer = field(repr=False)
    vae: object | None = field(default=None, repr=False)
    preview_decoder: object | None = field(default=None, repr=False)
    text_encoder: object | None = field(default=None, repr=False)
    default_context: torch.Tensor | None = field(default=None, repr=False)  # models without a text encoder
    action_names: tuple[str, ...] = ()
    fps: int = 16
    source: str = ""
    default_size: tuple[int, int] | None = None  # (width, height) the model was trained at, if it has one

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.transformer.parameters()).dtype

    @property
    def spatial_compression(self) -> int:
        return getattr(getattr(self.vae, "config", None), "spatial_compression", 8)

    @property
    def temporal_compression(self) -> int:
        return getattr(getattr(self.vae, "config", None), "temporal_compression", 4)

    def describe(self) -> str:
        c = self.config
        lines = [
            f"family: {self.family} ({get_family(self.family).description})",
            f"source: {self.source}",
            f"transformer: {c.num_layers} layers, dim {c.dim}, {c.num_heads} heads × {c.head_dim}, ffn {c.ffn_dim}, "
            f"{c.num_parameters() / 1e6:.1f}M params, {self.dtype} on {self.device}",
            f"sampling: steps {list(self.sampling.denoising_steps)} (warped={self.sampling.warp_denoising_steps}), "
            f"shift {self.sampling.shift}, {self.sampling.block_frames} latent frames per block",
            f"cache default: window {self.default_cache.window_frames}, sink {self.default_cache.sink_frames}",
            f"vae: {'yes' if self.vae is not None else 'none'}; text encoder: "
            f"{'yes' if self.text_encoder is not None else 'none (fixed context)' if self.default_context is not None else 'none'}",
        ]
        fp8 = count_fp8_linears(self.transformer)
        if fp8:
            lines.append(
                f"fp8: {fp8} block linear layers in e4m3 (the embeddings, time projection and head in {self.dtype})"
            )
        if self.action_names:
            lines.append(f"actions: {', '.join(self.action_names)}")
        return "\n".join(lines)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use device='cpu'")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {
        "fp32": torch.float32,
        "float32": torch.float32,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
    }
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32  # the CPU path runs in fp32
    if dtype not in table:
        raise ConfigError(f"unknown dtype '{dtype}'; expected auto, fp32, bf16 or fp16")
    return table[dtype]


def load_world_model(
    path: str = "bundled",
    *,
    family: str | None = None,
    vae_path: str | None = None,
    preview_decoder_path: str | None = None,
    text_encoder_path: str | None = None,
    dtype: str | torch.dtype = "auto",
    device: str = "auto",
    attention: str = "sdpa",
    num_heads: int | None = None,
    fp8: bool = False,
    compile: bool = False,
) -> WorldModel:
    """Load a world model: "bundled" for the shipped toy model, or a transformer checkpoint path.

    compile=True compiles each transformer block with `torch.compile` (`compile_blocks`): the
    elementwise work fuses (diffusion 1.24× the reference's speed instead of 0.95× on an H200, see
    docs/performance.md) at the cost of a one-off compilation on the first block (not timed separately on the GPU);
    a Wan VAE on CUDA then also decodes with its compiled options (1.61× instead of 1.28×).

    fp8=True stores the transformer blocks' linear layers in fp8 e4m3 and runs them as fp8 GEMMs
    (`inferix_core.models.fp8`); the rest of the model stays in `dtype`. Off by default: it trades
    ~1–3 % relative error per layer for speed and half the block weights' memory, and it only runs
    fast on CUDA GPUs with compute capability ≥ 8.9 (elsewhere an emulation runs, with a warning).
    """
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if path == "bundled":
        ignored = {
            "vae_path": vae_path,
            "text_encoder_path": text_encoder_path,
            "preview_decoder_path": preview_decoder_path,
        }
        given = [f"{k}={v!r}" for k, v in ignored.items() if v not in (None, "", "bundled")]
        if given:  # a Wan VAE / umT5 cannot decode or condition the toy model: say so rather than ignore it
            raise ConfigError(
                f"the bundled model brings its own decoder and text encoder; {', '.join(given)} cannot be used with "
                "it. Drop --vae/--text-encoder (choose 'bundled'/'none' in the loader), or load a causal Wan checkpoint."
            )
        return _maybe_compile(_load_bundled(dev, dt, attention, fp8), compile)
    from .wan.checkpoint import load_wan_checkpoint

    if not Path(path).exists():
        raise MissingFileError(f"model file '{path}' does not exist; put it in ComfyUI's models/diffusion_models")
    state, config, info = load_wan_checkpoint(path, dtype=dt, device="cpu", num_heads=num_heads)
    fam = family or next((h for h in info.family_hints if h in FAMILIES), "self_forcing")
    spec = get_family(fam)
    transformer = _build_transformer(config, state, dev, dt, attention)
    if fp8:
        quantize_linears_fp8(transformer)
    vae = _load_vae(vae_path, dev, dt) if vae_path else None
    preview = _load_preview(preview_decoder_path, vae, dev, dt) if preview_decoder_path else None
    text = _load_text_encoder(text_encoder_path, config.text_len, dev, dt) if text_encoder_path else None
    model = WorldModel(
        fam,
        config,
        spec.sampling,
        spec.cache,
        transformer,
        vae,
        preview,
        text,
        fps=spec.fps,
        source=f"{path} ({info.layout})",
    )
    return _maybe_compile(model, compile)


def _maybe_compile(model: WorldModel, compile: bool) -> WorldModel:
    if compile:
        from .wan.causal_transformer import compile_blocks

        log.info("compiling the %d transformer blocks on first use (torch.compile)", len(model.transformer.blocks))
        compile_blocks(model.transformer)
        if getattr(model.vae, "decode_options", None) is not None:  # the Wan VAE on CUDA: compile its fused step too
            from ..vae.config import VAEDecodeOptions

            model.vae.decode_options = VAEDecodeOptions.fast(compile=True)
    return model


def _build_transformer(config: WanConfig, state: dict, device, dtype, attention: str) -> CausalWanTransformer:
    with torch.device("meta"):
        model = CausalWanTransformer(config)
    model.load_state_dict(state, strict=True, assign=True)
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    set_attention_backend(model, attention)
    return model


def set_attention_backend(model: torch.nn.Module, name: str) -> None:
    """Point every attention layer at the named backend (unknown names raise)."""
    from ..attention import get_attention_backend

    backend = get_attention_backend(name)
    for module in model.modules():
        if hasattr(module, "attend"):
            module.attend = backend.attend


def _load_vae(path: str, device, dtype):
    """The Wan VAE; on CUDA it decodes with `VAEDecodeOptions.fast()`.

    Why the fast options by default on the GPU: 1.28× faster streamed decode on an H200 (157.6 vs
    201.2 ms per 12-frame block, docs/performance.md) with bf16-level differences only, no less
    accurate against fp32 (tests/vae/test_decode_options.py). On the CPU the reference path stays.
    """
    from ..vae import WanVAE
    from ..vae.config import VAEDecodeOptions

    vae = WanVAE.from_file(path, device=device, dtype=dtype if device.type == "cuda" else torch.float32)
    if device.type == "cuda":
        vae.decode_options = VAEDecodeOptions.fast()
    return vae


def _load_preview(path: str, full_vae, device, dtype):
    from ..vae.taehv import load_preview_decoder

    # falls back to the full VAE, with a log line, when the file is absent
    return load_preview_decoder(path, full_vae, device=device, dtype=dtype if device.type == "cuda" else torch.float32)


def _load_text_encoder(path: str, text_len: int, device, dtype):
    from ..text.umt5 import PromptCache, UMT5TextEncoder

    encoder = UMT5TextEncoder.load(
        path, text_len=text_len, device=device, dtype=dtype if device.type == "cuda" else torch.float32
    )
    return PromptCache(encoder)  # re-encoding an earlier prompt costs nothing


def _load_bundled(device, dtype, attention: str, fp8: bool = False) -> WorldModel:
    """The toy driving-world model shipped in inferix_core/assets/bundled (its own tiny causal AE)."""
    from ..assets import load_bundled

    b = load_bundled(device=device)
    transformer = b.transformer.to(dtype).requires_grad_(False)
    set_attention_backend(transformer, attention)
    if fp8:
        quantize_linears_fp8(transformer)
    vae = b.vae.requires_grad_(False)  # decodes in float32: it is small and exact
    return WorldModel(
        "bundled",
        transformer.config,
        b.sampling_config(),
        b.cache_config(),
        transformer,
        vae,
        default_context=b.context.to(device, dtype),
        action_names=tuple(b.action_names),
        fps=int(b.config.get("fps", 16)),
        source="bundled (inferix_core/assets/bundled)",
        default_size=(int(b.config["width"]), int(b.config["height"])),
    )
