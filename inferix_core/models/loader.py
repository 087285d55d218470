"""load_world_model: a file (or "bundled") → a WorldModel: detection → family → components, set by one LoadOptions.

Causal Wan families share one architecture and differ in how they sample (steps, warping, shift,
window, sink, KV recompute) and in which weights of a training checkpoint their authors run. The
family is the caller's `family`, else what `family_detect.detect_family` reads from the file's content
(then its name); the choice and its reason travel with the WorldModel (`describe()`). Every family's
settings and where they come from (repo, commit, file) are in docs/models.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, MissingFileError
from ..tensors import prefer_expandable_segments
from .block_swap import enable_block_swap
from .components import (
    build_transformer,
    check_latent_channels,
    load_preview,
    load_text_encoder,
    load_vae,
    loader_vae_decode_options,
    set_attention_backend,
)
from .families import FAMILIES, Family, get_family
from .family_detect import FamilyChoice, FileFacts, detect_family, recache_style_beside
from .fp8 import quantize_linears_fp8
from .handle import WorldModel
from .lora import LoraArg, lora_label, merge_lora_files
from .matrix_game2 import resolve_variant, stored_run_settings
from .options import WEIGHTS_CHOICES, LoadOptions

log = logging.getLogger(__name__)

_CONTAINER = {"ema": "generator_ema", "generator": "generator"}


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


def load_world_model(path: str = "bundled", options: LoadOptions | None = None, **settings: Any) -> WorldModel:
    """Load a world model: "bundled" for the shipped toy model, or a transformer checkpoint path.

    `options` (a LoadOptions) holds every setting; keywords of the same names (`fp8=True`) are laid over it, so
    `load_world_model(path, fp8=True)` and `load_world_model(path, LoadOptions(fp8=True))` are one call.

    compile=True compiles each transformer block with `torch.compile` (`compile_blocks`): the
    elementwise work fuses (diffusion 1.24× the reference's speed instead of 0.95× on an H200, see
    docs/performance.md) at the cost of a one-off compilation on the first block (not timed separately on the GPU);
    a Wan VAE on CUDA then also decodes with its compiled options (1.61× instead of 1.28×).

    family="auto" (or None) reads the family from the file (`family_detect`); the choice and its reason are
    in `WorldModel.family_reason` and `describe()`. weights="auto" loads the dict of a training checkpoint
    that the family's authors load (`Family.weights`); "ema"/"generator" force `generator_ema`/`generator`.

    fp8_weights=True keeps the block linears' weights in e4m3 (half the memory of bf16) and dequantizes
    each per call (`FP8WeightLinear`): an fp8-scaled file keeps its stored values and scales, so the
    outputs are bitwise those of dequantizing at load; any other file is quantized at load (per output
    channel). The GEMMs stay in `dtype` (unlike fp8=True, which also quantizes the activations).

    text_encoder_placement: "device" keeps umT5 on the device; "cpu" runs it on the host; "offload"
    keeps it on the host and moves it to the device only while it encodes a new prompt
    (`inferix_core.text.placement`). The prompt cache makes re-encoding rare either way.

    gpu_memory (bytes): plan block swap for a card of this size when resident_blocks is None: the
    memory planner reserves the KV cache (the family's default window), activations, the VAE and a
    resident text encoder at the model's size (480×832 unless it has its own), slices the Wan VAE's
    decode when that makes room (the same frames), and keeps as many blocks resident as fit; a resident
    text encoder that leaves no plan at all moves to 'offload' or 'cpu' (logged); a run that still cannot
    fit is refused before anything is loaded, naming a fix.

    resident_blocks=N keeps the first N transformer blocks on the device and streams the others from
    pinned host memory one block ahead (`inferix_core.models.block_swap`); results are bitwise those
    of the resident model. None (default) keeps every block resident.

    fp8=True stores the transformer blocks' linear layers in fp8 e4m3 and runs them as fp8 GEMMs
    (`inferix_core.models.fp8`); the rest of the model stays in `dtype`. Off by default: it trades
    ~1–3 % relative error per layer for speed and half the block weights' memory, and it only runs
    fast on CUDA GPUs with compute capability ≥ 8.9 (elsewhere an emulation runs, with a warning).

    lora=[(path, strength), ...] merges LoRA files into the transformer weights before fp8 and compile
    (`inferix_core.models.lora`: peft, ComfyUI, kohya and diffusers formats; several stack).

    cuda_graphs=True captures each transformer call shape (all blocks of one step) as a CUDA graph and
    replays it (`inferix_core.models.wan.cuda_graphs`): no per-kernel launch cost on the host. Off by
    default until measured; where it cannot apply (CPU, block swap, an offloaded/paged/quantized cache,
    actions) it says so once and runs eagerly. The KV cache and the graphs stay allocated between runs.
    """
    o = LoadOptions.of(options, **settings)
    family, weights, attention, num_heads, fp8, lora = o.family, o.weights, o.attention, o.num_heads, o.fp8, o.lora
    vae_path, preview_decoder_path, text_encoder_path = o.vae_path, o.preview_decoder_path, o.text_encoder_path
    resident_blocks, fp8_weights, text_encoder_placement = o.resident_blocks, o.fp8_weights, o.text_encoder_placement
    gpu_memory = o.gpu_memory
    dev = resolve_device(o.device)
    dt = resolve_dtype(o.dtype, dev)
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
        if family not in (None, "auto", "bundled"):
            log.warning("family=%s ignored: the bundled model is its own family", family)
        bundled = _load_bundled(dev, dt, attention, fp8, lora)
        if fp8_weights:
            quantize_linears_fp8(bundled.transformer, weight_only=True)
        if resident_blocks is not None:
            enable_block_swap(bundled.transformer, resident_blocks, dev)
        elif gpu_memory is not None:
            log.info("the bundled model is a few MiB: every block stays resident within the %.1f GiB budget",
                     gpu_memory / 2**30)  # fmt: skip
        return _maybe_cuda_graphs(maybe_compile(bundled, o.compile), o.cuda_graphs)
    from .wan.checkpoint import load_wan_checkpoint

    if not Path(path).exists():
        raise MissingFileError(f"model file '{path}' does not exist; put it in ComfyUI's models/diffusion_models")
    if weights not in WEIGHTS_CHOICES:
        raise ConfigError(f"unknown weights '{weights}'; expected one of {', '.join(WEIGHTS_CHOICES)}")
    if fp8 and fp8_weights:
        raise ConfigError("fp8=True already stores the block weights in fp8; leave fp8_weights off with it")
    choice = resolve_family(path, family, num_heads=num_heads)
    spec = get_family(choice.family)
    container = _container_for(path, weights, spec)
    keep_fp8 = fp8_weights and not lora  # a LoRA merges into dequantized weights, which are then quantized again
    if fp8_weights and lora:
        log.info("fp8 weights with a LoRA: merging into the dequantized weights, then quantizing them at load")
    state, config, info = load_wan_checkpoint(
        path, dtype=dt, device="cpu", num_heads=num_heads, container=container, keep_fp8=keep_fp8
    )
    log.info("%s: family %s (%s)", Path(path).name, choice.family, choice.reason)
    state = merge_lora_files(state, lora, device=dev)  # before fp8 and compile; no LoRA: the same tensors
    decode_slicing = None
    if gpu_memory is not None and resident_blocks is None:
        resident_blocks, decode_slicing, text_encoder_placement = planned_resident_blocks(
            config, spec, gpu_memory, dt, fp8 or fp8_weights, text_encoder_path, text_encoder_placement, dev
        )
    variant = None
    if config.action_config is not None:  # Matrix-Game 2.0 weights (blocks.N.action_model.*, img_emb, in_dim 36)
        if choice.family != "matrix_game2":
            raise ConfigError(f"'{path}' is a Matrix-Game 2.0 model (action modules); use family 'matrix_game2'")
        stored, where = stored_run_settings(path)
        variant = resolve_variant(config, stored, f"'{Path(path).name}' ({where})")
        spec = Family(choice.family, variant.description, variant.sampling, variant.cache, fps=16)
    elif choice.family == "matrix_game2":
        raise ConfigError(f"'{path}' has no action modules (blocks.N.action_model.*): it is not a Matrix-Game 2.0 file")
    if config.has_image_input != (choice.family == "wan21_i2v"):
        raise ConfigError(
            f"'{path}' is a Wan 2.1 I2V model (img_emb, cross_attn.k_img/v_img, in_dim 36); use family 'wan21_i2v'"
            if config.has_image_input
            else f"'{path}' has no image-conditioning weights (img_emb, cross_attn.k_img): it is not a Wan 2.1 I2V file"
        )
    transformer = build_transformer(config, state, dev, dt, attention, resident_blocks, fp8, fp8_weights)
    if fp8 and resident_blocks is None:
        quantize_linears_fp8(transformer)
    vae = load_vae(vae_path, dev, dt) if vae_path else None
    if decode_slicing is not None and vae is not None and decode_slicing != vae.stream_slicing:
        log.info(
            "the VAE decodes %s, as planned for the budget (the same frames)",
            decode_slicing.describe(spec.sampling.block_frames),
        )
        vae.stream_slicing = decode_slicing  # less memory per block
    check_latent_channels(config, vae, vae_path)
    preview = load_preview(preview_decoder_path, vae, dev, dt) if preview_decoder_path else None
    if text_encoder_placement not in ("device", "cpu", "offload"):
        raise ConfigError(f"text_encoder_placement must be device, cpu or offload, not '{text_encoder_placement}'")
    text = (
        load_text_encoder(text_encoder_path, config.text_len, dev, dt, text_encoder_placement)
        if text_encoder_path
        else None
    )
    model = WorldModel(
        choice.family,
        config,
        spec.sampling,
        spec.cache,
        transformer,
        vae,
        preview,
        text,
        fps=spec.fps,
        source=f"{path} ({info.layout}"
        + (f", '{info.container_key}' weights" if info.container_key else "")
        + f"){lora_label(lora)}",
        family_reason=choice.reason,
        variant=variant.name if variant else "",
        recache_style=recache_style_beside(Path(path), choice.family) if Path(path).exists() else None,
    )
    return _maybe_cuda_graphs(maybe_compile(model, o.compile), o.cuda_graphs)


def resolve_family(path: str, family: str | None = "auto", *, num_heads: int | None = None) -> FamilyChoice:
    """The family to run `path` with, and why: the caller's choice, else the file's evidence (family_detect)."""
    if family not in (None, "auto"):
        get_family(family)  # unknown names raise, listing the known ones
        return FamilyChoice(family, f"family={family} was given", "argument")
    from .wan.checkpoint import inspect_wan_checkpoint

    config, info = inspect_wan_checkpoint(path, num_heads=num_heads)
    facts = FileFacts(Path(path), config, frozenset(info.canonical_shapes), info.top_level_keys, info.metadata)
    return detect_family(facts, FAMILIES)


def _container_for(path: str, weights: str, spec: Family) -> str | None:
    """Which dict of a training checkpoint to load: the asked one, else the family's, if the file has it."""
    if weights != "auto":
        return _CONTAINER[weights]
    from .wan.sources import open_tensor_source

    wanted = _CONTAINER.get(spec.weights)
    top = getattr(open_tensor_source(Path(path), ()), "top_level_keys", ())
    if wanted in top:
        return wanted
    if top and ({"generator", "generator_ema"} & set(top)):
        other = next(k for k in ("generator_ema", "generator") if k in top)
        log.warning(
            "'%s' has no '%s' (the %s authors' choice); loading '%s'", Path(path).name, wanted, spec.name, other
        )
        return other
    return None


def maybe_compile(model: WorldModel, compile: bool) -> WorldModel:
    if compile:
        from .wan.causal_transformer import compile_blocks

        log.info("compiling the %d transformer blocks on first use (torch.compile)", len(model.transformer.blocks))
        compile_blocks(model.transformer)
        if getattr(model.vae, "decode_options", None) is not None:  # the Wan VAE on CUDA: compile its fused step too
            model.vae.decode_options = loader_vae_decode_options(model.device, compile=True)
    return model


def _maybe_cuda_graphs(model: WorldModel, cuda_graphs: bool) -> WorldModel:
    if cuda_graphs:
        from .wan.cuda_graphs import enable_cuda_graphs

        enable_cuda_graphs(model.transformer)  # logs why not where it cannot (CPU, block swap)
    return model


def planned_resident_blocks(config, family, budget, dtype, fp8_blocks, text_path, placement, device=None):
    """Block swap, the VAE decode slicing and the text encoder placement for a `budget`-byte card (see
    load_world_model's gpu_memory): (resident blocks or None when all fit, the `DecodeSlicing`, placement).
    On CUDA the card also holds the CUDA context and library workspaces (`planned_non_torch_bytes`).

    A resident text encoder that leaves no plan at all (even every block streamed) is placed 'offload'
    instead (on the GPU only to encode a new prompt) when it fits beside what the run keeps there, else
    'cpu': the same embeddings, logged; otherwise the placement asked stays.
    """
    from ..cache.planner import plan_resident_blocks, planned_non_torch_bytes
    from ..text.cost import TextEncoderCost, text_encoder_bytes

    if device is not None:
        prefer_expandable_segments(device)  # the plan fills the card: fragmentation must not undo it

    non_torch = planned_non_torch_bytes(device, budget) if device is not None else 0
    text = TextEncoderCost(text_encoder_bytes(text_path) if placement == "device" else 0, placement)  # gives way last
    latent_h, latent_w = 60, 104  # 480x832 through the Wan VAE's 8x
    window = family.cache.window_frames
    resident, memory_plan = plan_resident_blocks(
        config, budget, latent_h, latent_w, family.cache, dtype=dtype, block_frames=family.sampling.block_frames,
        max_frames=21 if window == -1 else None, fp8_block_weights=fp8_blocks, non_torch_bytes=non_torch, text=text,
    )  # fmt: skip
    if memory_plan.text_placement != placement:
        placement = memory_plan.text_placement
        log.info(
            "the text encoder (%.1f GiB) does not fit beside the run in %.1f GiB: placed '%s' (%s; the same "
            "embeddings)", text.weights_bytes / 2**30, budget / 2**30, placement,
            "on the GPU only while it encodes a new prompt" if placement == "offload" else "it runs on the host",
        )  # fmt: skip
    log.info("memory plan for a %.1f GiB budget:\n%s", budget / 2**30, memory_plan.describe())
    slicing = memory_plan.decode.slicing if memory_plan.decode is not None else None
    return (None if resident >= config.num_layers else resident), slicing, placement


def _load_bundled(
    device, dtype, attention: str, fp8: bool = False, lora: Sequence[LoraArg] | None = None
) -> WorldModel:
    """The toy driving-world model shipped in inferix_core/assets/bundled (its own tiny causal AE)."""
    from .bundled import load_bundled

    b = load_bundled(device=device)
    transformer = b.transformer.to(dtype).requires_grad_(False)
    if lora:
        transformer.load_state_dict(merge_lora_files(transformer.state_dict(), lora, device=device))
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
        # v2: the prompt names a scene through the model's vocabulary; v1 (None): one fixed learned context
        text_encoder=b.prompt_encoder.to(device, dtype) if b.prompt_encoder is not None else None,
        default_context=b.context.to(device, dtype),
        action_names=tuple(b.action_names),
        fps=int(b.config.get("fps", 16)),
        source=f"bundled (inferix_core/assets/bundled){lora_label(lora)}",
        family_reason="the bundled toy model ships its own settings",
        default_size=(int(b.config["width"]), int(b.config["height"])),
    )


__all__ = [
    "load_world_model",
    "maybe_compile",
    "planned_resident_blocks",
    "resolve_device",
    "resolve_dtype",
    "resolve_family",
]
