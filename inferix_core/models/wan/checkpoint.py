"""Read and write Wan 2.1 transformer weights in the layouts users have, as canonical Wan 2.1 names.

`load_wan_checkpoint` returns (state dict, WanConfig read from the tensor shapes, CheckpointInfo). It reads
one tensor at a time (safetensors `safe_open`, `.pt` through `torch.load(mmap=True, weights_only=True)`)
so peak host memory stays near one copy of the model. It never executes pickled code and never builds
a module; key maps live in layouts.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import CheckpointLayoutError
from .action_module import resolve_action_config
from .config import WanConfig
from .layouts import (
    CONTAINER_KEYS,
    EXPECTED_LAYOUTS_TEXT,
    KeyLayout,
    analyse_keys,
    detect_layout,
    from_canonical,
    strip_wrappers,
    to_canonical,
)
from .shapes import WAN_HEAD_DIM, check_wan_shapes, expected_wan_shapes, infer_wan_config
from .sources import TensorSource, open_tensor_source, weights_folder

logger = logging.getLogger(__name__)

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_E4M3_MAX = 448.0
# Side tensors of ComfyUI fp8 files: legacy `scale_weight` (+ `scaled_fp8` marker), newer `weight_scale`
# (+ `comfy_quant` JSON marker); input scales only matter to fp8 activations, which we don't use.
_WEIGHT_SCALE = re.compile(r"^(.*)\.(scale_weight|weight_scale)$")
_DROPPED_SIDE = re.compile(r"(^|\.)(scaled_fp8|comfy_quant|scale_input|input_scale)$")
_SIZE_HINTS = {(1536, 30): "wan2.1-1.3B", (5120, 40): "wan2.1-14B", (3072, 30): "wan2.2-5B"}
_NAME_HINTS = {"self_forcing": ("self_forcing", "self-forcing", "selfforcing"), "causvid": ("causvid",),
               "longlive": ("longlive",)}  # fmt: skip


@dataclass(frozen=True)
class CheckpointInfo:
    """What a loaded file was: layout, storage dtypes, quantisation and hints for the family registry."""

    path: str
    layout: str  # one of layouts.LAYOUTS
    file_format: str  # "safetensors", "pt" (torch zip) or "pt-legacy"
    key_prefix: str  # prefix stripped before the canonical names, e.g. "model.diffusion_model."
    container_key: str | None  # `generator_ema` etc. for training checkpoints
    stored_dtypes: tuple[str, ...]  # distinct dtypes of the stored weights, e.g. ("bfloat16", "float8_e4m3fn")
    quantization: str | None  # None, "fp8" (no scales) or "fp8_scaled"
    num_heads_source: str  # "argument", "file metadata", "config.json" or "head_dim 128"
    family_hints: tuple[str, ...]  # e.g. ("t2v", "wan2.1-1.3B", "self_forcing", "action")
    dropped_keys: tuple[str, ...] = ()  # stored keys deliberately not returned (markers, input scales, rope)
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    top_level_keys: tuple[str, ...] = ()  # a torch checkpoint's top-level keys (generator, generator_ema, critic, …)
    canonical_shapes: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


# --- loading -----------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """Which stored key feeds which canonical key, and the fp8 scale (stored key) of each weight."""

    tensors: dict[str, str] = field(default_factory=dict)  # canonical -> stored
    scales: dict[str, str] = field(default_factory=dict)  # canonical weight -> stored scale key
    dropped: list[str] = field(default_factory=list)


def plan_keys(src: TensorSource, source: str) -> tuple[_Plan, KeyLayout]:
    stripped = {strip_wrappers(k): k for k in src.keys()}  # noqa: SIM118 (a TensorSource, not a dict)
    layout = analyse_keys(stripped, source, src.container)
    plan = _Plan()
    for key, stored in stripped.items():
        if not key.startswith(layout.prefix):
            continue  # fixture traces, optimizer state, other models in the same file
        key = key[len(layout.prefix) :]
        if _DROPPED_SIDE.search(key):
            plan.dropped.append(stored)
            continue
        scale = _WEIGHT_SCALE.match(key)
        canonical = to_canonical(scale.group(1) + ".weight" if scale else key, layout.naming)
        if canonical is None:
            plan.dropped.append(stored)
        elif scale:
            plan.scales[canonical] = stored
        else:
            plan.tensors[canonical] = stored
    orphans = sorted(set(plan.scales) - set(plan.tensors))
    if orphans:
        raise CheckpointLayoutError(f"{source} has fp8 scales without weights: {', '.join(orphans[:5])}")
    return plan, layout


def _metadata_config(metadata: Mapping[str, str]) -> dict | None:
    """The model config stored in a safetensors header: ours under `config`, the fixtures' in `info`."""
    try:
        if "config" in metadata:
            cfg = json.loads(metadata["config"])
        elif "info" in metadata:
            cfg = json.loads(metadata["info"]).get("config")
        else:
            return None
    except (ValueError, AttributeError):
        return None
    return cfg if isinstance(cfg, dict) and "dim" in cfg else None


def stored_model_config(path: Path, metadata: Mapping[str, str], dim: int) -> tuple[dict | None, str]:
    """(the model config stored with the weights, where from): the file's metadata, else a config.json beside it
    that describes this transformer (its `dim` equals the weights'), else (None, "no config")."""
    cfg = _metadata_config(metadata)
    if cfg is not None:
        return cfg, "file metadata"
    beside = weights_folder(path) / "config.json"
    if beside.is_file():
        try:
            cfg = json.loads(beside.read_text())
        except ValueError:
            cfg = None
        if isinstance(cfg, dict) and cfg.get("dim") == dim:
            return cfg, "config.json"
    return None, "no config"


def _num_heads_hint(path: Path, metadata: Mapping[str, str], dim: int) -> tuple[int | None, int | None, str]:
    """(num_heads, text_len, where from) from the file's metadata or a config.json beside it.

    A config.json is only trusted when it describes this transformer (its hidden size equals `dim`):
    a models/ folder may hold one that belongs to another file.
    """
    cfg = _metadata_config(metadata)
    if cfg is not None and "num_heads" in cfg:
        return int(cfg["num_heads"]), cfg.get("text_len"), "file metadata"
    beside = weights_folder(path) / "config.json"
    if beside.is_file():
        try:
            cfg = json.loads(beside.read_text())
        except ValueError as e:
            logger.warning("ignoring '%s': not valid JSON (%s)", beside, e)
            cfg = {}
        heads = cfg.get("num_attention_heads", cfg.get("num_heads")) if isinstance(cfg, dict) else None
        if heads is not None:
            their_dim = cfg.get("dim") or int(heads) * int(cfg.get("attention_head_dim", dim // int(heads)))
            if their_dim == dim:
                return int(heads), cfg.get("text_len"), "config.json"
            logger.warning("ignoring '%s': it describes dim=%s, the weights have dim=%d", beside, their_dim, dim)
    return None, None, "head_dim 128"


def _family_hints(config: WanConfig, path: Path, container: str | None) -> tuple[str, ...]:
    hints = [config.model_type]
    if (size := _SIZE_HINTS.get((config.dim, config.num_layers))) is not None:
        hints.append(size)
    name = path.name.lower()
    names = [family for family, words in _NAME_HINTS.items() if any(w in name for w in words)]
    if "longlive" in names and config.model_type == "ti2v":  # LongLive on Wan 2.2 latents is LongLive 2.0
        names.insert(names.index("longlive"), "longlive2")
    hints += names
    if container is not None:
        hints.append("training_checkpoint")
    if config.action_dim:
        hints.append("action")
    if config.action_config is not None:  # Matrix-Game 2.0's action modules: its family whatever the name
        hints.insert(0, "matrix_game2")
    return tuple(hints)


def _convert(t: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype, device: str | torch.device,
             keep_fp8: bool) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """One stored tensor to the compute dtype: dequantise fp8 (weight.float() * scale) unless keep_fp8.

    A scale beside a non-fp8 weight is applied too (as ComfyUI's scaled ops would), so it never gets lost.
    """
    if t.dtype in FP8_DTYPES and keep_fp8:
        scale = scale.float() if scale is not None else torch.ones((), dtype=torch.float32)
        return t.to(device), scale.to(device)  # fp8 GEMM path: weight and scale travel together
    if t.dtype in FP8_DTYPES or scale is not None:
        if scale is None:
            return t.to(torch.float32).to(device=device, dtype=dtype), None
        scale = scale.float()
        if scale.numel() > 1:  # per-output-channel scales broadcast over the input dims
            scale = scale.reshape(-1, *([1] * (t.dim() - 1)))
        return (t.float() * scale).to(device=device, dtype=dtype), None
    return t.to(device=device, dtype=dtype), None


def _open(path: Path, container: str | None) -> TensorSource:
    """Open the weights; `container` (e.g. `generator`) picks that dict of a training checkpoint, or fails."""
    src = open_tensor_source(path, (container,) if container else CONTAINER_KEYS)
    top = getattr(src, "top_level_keys", ())
    if container and src.container != container:
        held = ", ".join(f"'{k}'" for k in top) or "no dicts"
        raise CheckpointLayoutError(
            f"'{path.name}' has no '{container}' weights (it holds {held}); choose weights=auto or one it holds."
        )
    return src


def _read_config(path: Path, src: TensorSource, num_heads: int | None, allow_i2v: bool):
    """Steps 1–2 of loading: keys → layout → canonical names, then the config from the shapes."""
    name = f"'{path.name}'"
    plan, layout = plan_keys(src, name)
    shapes = {k: tuple(src.shape(s)) for k, s in plan.tensors.items()}
    if "patch_embedding.weight" not in shapes:  # e.g. a diffusers file with an unknown naming
        raise CheckpointLayoutError(f"{name}: no tensor maps to 'patch_embedding.weight'. {EXPECTED_LAYOUTS_TEXT}")
    meta_heads, text_len, heads_from = _num_heads_hint(path, src.metadata, shapes["patch_embedding.weight"][0])
    if num_heads is not None:
        if meta_heads is not None and meta_heads != num_heads:
            logger.warning("%s: num_heads=%d overrides %d from %s", path.name, num_heads, meta_heads, heads_from)
        heads_from = "argument"
    config = infer_wan_config(shapes, num_heads if num_heads is not None else meta_heads, text_len or 512)
    if config.model_type == "flf2v" and not allow_i2v:
        raise CheckpointLayoutError(
            f"{name} is a first-last-frame-to-video (flf2v) Wan model (img_emb.emb_pos: two start images); only "
            "single-image Wan 2.1 I2V (and T2V) weights run here. Pass allow_i2v=True to read the weights anyway."
        )
    if config.action_config is not None:  # Matrix-Game: the RoPE split/theta and the ratio are not in the shapes
        stored, where = stored_model_config(path, src.metadata, config.dim)
        act = resolve_action_config(config.action_config, (stored or {}).get("action_config"), f"{name} ({where})")
        config = dataclasses.replace(config, action_config=act)
    _check_metadata_config(config, src.metadata, name)
    check_wan_shapes(shapes, config, name)
    return plan, layout, shapes, config, heads_from


def _info(path, src, plan, layout, shapes, config, heads_from, stored_dtypes=()) -> CheckpointInfo:
    has_fp8 = any(d.startswith("float8") for d in stored_dtypes)
    return CheckpointInfo(
        path=str(path),
        layout=layout.layout,
        file_format=src.file_format,
        key_prefix=layout.prefix,
        container_key=src.container,
        stored_dtypes=tuple(sorted(stored_dtypes)),
        quantization=("fp8_scaled" if plan.scales else "fp8") if has_fp8 else None,
        num_heads_source=heads_from,
        family_hints=_family_hints(config, path, src.container),
        dropped_keys=tuple(sorted(plan.dropped)),
        metadata=dict(src.metadata),
        top_level_keys=tuple(getattr(src, "top_level_keys", ())),
        canonical_shapes=dict(shapes),
    )


def inspect_wan_checkpoint(
    path: str | Path, num_heads: int | None = None, *, container: str | None = None, allow_i2v: bool = False
) -> tuple[WanConfig, CheckpointInfo]:
    """The config and CheckpointInfo of a weights file without converting any tensor (for family detection)."""
    path = Path(path)
    src = _open(path, container)
    plan, layout, shapes, config, heads_from = _read_config(path, src, num_heads, allow_i2v)
    return config, _info(path, src, plan, layout, shapes, config, heads_from)


def load_wan_checkpoint(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    num_heads: int | None = None,
    keep_fp8: bool = False,
    *,
    allow_i2v: bool = False,
    container: str | None = None,
) -> tuple[dict[str, torch.Tensor], WanConfig, CheckpointInfo]:
    """Load a Wan 2.1 transformer from any supported layout as canonical (original Wan) names.

    Args:
        path: a .safetensors / .pth / .pt file, a diffusers transformer folder (sharded or not), or a
            diffusers pipeline root (model_index.json; its transformer/ is used).
        dtype: compute dtype of the returned floating tensors; fp8 weights are dequantised to it.
        num_heads: overrides the head count. Otherwise it comes from the file's metadata, a
            config.json beside the file, or dim / 128 (shapes alone can't tell; see infer_wan_config).
        keep_fp8: keep fp8 weights as stored and return `<layer>.scale_weight` (float32) beside each
            one, for an fp8 GEMM path; other tensors still go to `dtype`.
        allow_i2v: also read Wan FLF2V weights (two start images), which the engine does not run; Wan 2.1
            I2V weights (one start image, `k_img`/`v_img`) load without it.
        container: which dict of a training checkpoint to read (`generator_ema`, `generator`); None takes
            the first of CONTAINER_KEYS present. Asking for one the file lacks is an error naming what it holds.
    """
    path = Path(path)
    src = _open(path, container)
    name = f"'{path.name}'"
    if src.container:
        logger.info("%s: using the '%s' weights of the training checkpoint", path.name, src.container)
    # 1. keys → layout → canonical names; 2. config from shapes, heads and text length from the caller,
    # the metadata or config.json
    plan, layout, shapes, config, heads_from = _read_config(path, src, num_heads, allow_i2v)
    # 3. tensors, one at a time
    state: dict[str, torch.Tensor] = {}
    stored_dtypes: Counter[str] = Counter()
    for canonical, stored in plan.tensors.items():
        t = src.get(stored)
        if not t.is_floating_point():
            raise CheckpointLayoutError(
                f"{name} stores '{stored}' as {str(t.dtype).removeprefix('torch.')}; only fp32/fp16/bf16 and "
                "fp8 (optionally ComfyUI-scaled) weights are supported, not int8/4-bit/GGUF-style quantisation."
            )
        stored_dtypes[str(t.dtype).removeprefix("torch.")] += 1
        scale = src.get(plan.scales[canonical]) if canonical in plan.scales else None
        state[canonical], kept_scale = _convert(t, scale, dtype, device, keep_fp8)
        if kept_scale is not None:
            state[canonical.removesuffix("weight") + "scale_weight"] = kept_scale
        del t
    info = _info(path, src, plan, layout, shapes, config, heads_from, stored_dtypes)
    logger.info("loaded %s: layout %s, %s, %s, %d tensors", path.name, info.layout,
                "/".join(info.stored_dtypes), info.family_hints, len(state))  # fmt: skip
    return state, config, info


def _check_metadata_config(config: WanConfig, metadata: Mapping[str, str], source: str) -> None:
    """A config stored in the file (fixtures, our own saves) must agree with the shapes."""
    stored = _metadata_config(metadata)
    if stored is None:
        return
    mine = config.to_dict()

    def differs(v, m) -> bool:  # nested dicts (Matrix-Game's action_config): only the keys the file has
        if isinstance(v, dict) and isinstance(m, dict):
            return any(k not in m or differs(x, m[k]) for k, x in v.items())
        return (list(v) if isinstance(v, tuple) else v) != (list(m) if isinstance(m, tuple) else m)

    diff = [f"{k}: file says {v!r}, shapes say {mine[k]!r}" for k, v in stored.items()
            if k in mine and differs(v, mine[k])]  # fmt: skip
    if diff:
        raise CheckpointLayoutError(
            f"{source}: the config in its metadata disagrees with its tensors ({'; '.join(diff)})"
        )


# --- saving ------------------------------------------------------------------------------------------

SAVE_LAYOUTS = ("wan", "comfyui", "diffusers", "self_forcing", "fixture")
_SAVE_PREFIX = {"wan": "", "comfyui": "model.diffusion_model.", "diffusers": "", "self_forcing": "model.",
                "fixture": "weights."}  # fmt: skip


def _quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaled e4m3: scale = amax / 448, as ComfyUI's scaled fp8 files store it."""
    scale = (w.detach().float().abs().amax() / FP8_E4M3_MAX).clamp_min(1e-12)
    return (w.float() / scale).to(torch.float8_e4m3fn), scale


def save_wan_checkpoint(
    state_dict: Mapping[str, torch.Tensor],
    path: str | Path,
    layout: str = "wan",
    *,
    config: WanConfig | None = None,
    dtype: torch.dtype | None = None,
    fp8_scaled: bool = False,
) -> None:
    """Write a canonical state dict in one of SAVE_LAYOUTS (the inverse of load_wan_checkpoint).

    `.safetensors` paths get safetensors, anything else `torch.save` (self_forcing: a dict with
    `generator_ema`). `config`, when given, is stored as metadata (and as diffusers config.json) so the
    head count survives. `fp8_scaled` writes ComfyUI scaled fp8: 2-D block weights as e4m3 with a
    `.scale_weight` beside each and a `scaled_fp8` marker; other tensors in `dtype`.
    """
    if layout not in SAVE_LAYOUTS:
        raise CheckpointLayoutError(f"unknown layout '{layout}'; expected one of {', '.join(SAVE_LAYOUTS)}")
    path = Path(path)
    naming = "diffusers" if layout == "diffusers" else "wan"
    prefix = _SAVE_PREFIX[layout]
    out: dict[str, torch.Tensor] = {}
    for key, t in state_dict.items():
        t = t.detach().cpu()
        name = prefix + from_canonical(key, naming)
        if fp8_scaled and key.startswith("blocks.") and key.endswith(".weight") and t.dim() == 2:
            out[name], out[name.removesuffix("weight") + "scale_weight"] = _quantize_fp8(t)
        else:
            out[name] = t.to(dtype) if dtype is not None and t.is_floating_point() else t
        out[name] = out[name].contiguous()
    if fp8_scaled:
        out[prefix + "scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    if layout == "diffusers" and config is not None:
        (path.parent / "config.json").write_text(json.dumps(_diffusers_config(config), indent=2))
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        meta = {"format": "pt"}
        if config is not None and layout != "diffusers":  # diffusers keeps it in config.json, as upstream
            meta["config"] = json.dumps({k: v for k, v in config.to_dict().items() if k != "extra"})
        save_file(out, str(path), metadata=meta)
    else:
        torch.save({"generator_ema": out} if layout == "self_forcing" else out, path)


def _diffusers_config(config: WanConfig) -> dict:
    """WanTransformer3DModel config.json fields (names from diffusers transformer_wan.py __init__)."""
    return {
        "_class_name": "WanTransformer3DModel",
        "patch_size": list(config.patch_size),
        "num_attention_heads": config.num_heads,
        "attention_head_dim": config.head_dim,
        "in_channels": config.in_dim,
        "out_channels": config.out_dim,
        "text_dim": config.text_dim,
        "freq_dim": config.freq_dim,
        "ffn_dim": config.ffn_dim,
        "num_layers": config.num_layers,
        "cross_attn_norm": config.cross_attn_norm,
        "qk_norm": "rms_norm_across_heads" if config.qk_norm else None,
        "eps": config.eps,
    }


__all__ = [
    "EXPECTED_LAYOUTS_TEXT",
    "WAN_HEAD_DIM",
    "CheckpointInfo",
    "check_wan_shapes",
    "detect_layout",
    "expected_wan_shapes",
    "infer_wan_config",
    "inspect_wan_checkpoint",
    "load_wan_checkpoint",
    "save_wan_checkpoint",
]
