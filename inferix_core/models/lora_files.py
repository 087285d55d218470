"""LoRA files: the `lora=` arguments and reading every format into canonical Wan 2.1 module names (models/lora.py
describes the formats and merges what this reads)."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointLayoutError, ConfigError, MissingFileError, ShapeMismatchError
from .wan.layouts import strip_wrappers
from .wan.sources import open_tensor_source

log = logging.getLogger(__name__)

# Training checkpoints nest the generator's LoRA (LongLive saves {"generator_lora", "critic_lora", "step"}).
LORA_CONTAINER_KEYS = ("generator_lora",)
# Prefixes in front of the module names, tried in this order (peft, ComfyUI, diffusers, training wrappers).
MODULE_PREFIXES = ("base_model.model.", "model.diffusion_model.", "diffusion_model.", "transformer.", "model.", "unet.")
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

_LOW_RANK = re.compile(r"^(?P<module>.+?)\.(?:lora_(?P<ab>A|B)(?:\.(?P<adapter>[^.]+))?|lora_(?P<du>down|up)|lora\.(?P<du2>down|up))\.weight$")  # fmt: skip
_SIDE = re.compile(r"^(?P<module>.+)\.(?P<kind>alpha|diff|diff_b)$")
_UNSUPPORTED = re.compile(r"(dora_scale|lora_magnitude_vector|lora_mid|hada_w|lokr_w|lora_(A|B|down|up)\.bias)")


@dataclass(frozen=True)
class LoraSpec:
    """One LoRA to apply: its file and strength (1 = as trained, 0 = off, negative = reversed)."""

    path: str
    strength: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.strength):
            raise ConfigError(f"LoRA strength for '{self.path}' must be a finite number, not {self.strength}")

    @property
    def label(self) -> str:
        return f"{Path(self.path).name}:{self.strength:g}"


def parse_lora_arg(text: str) -> LoraSpec:
    """`FILE[:STRENGTH]` from the command line; a Windows drive colon or a colon in the name is kept."""
    head, sep, tail = text.rpartition(":")
    if sep and head:
        try:
            strength = float(tail)
        except ValueError:
            pass
        else:
            return LoraSpec(head, strength)
    return LoraSpec(text, 1.0)


LoraArg = LoraSpec | str | tuple[str, float]


def as_lora_specs(loras: Iterable[LoraArg] | None) -> tuple[LoraSpec, ...]:
    """Normalise `lora=` arguments: specs, `(path, strength)` pairs or bare paths (strength 1)."""
    out = []
    for item in loras or ():
        if isinstance(item, LoraSpec):
            out.append(item)
        elif isinstance(item, (str, Path)):
            out.append(LoraSpec(str(item), 1.0))
        elif isinstance(item, Sequence) and len(item) == 2:
            out.append(LoraSpec(str(item[0]), float(item[1])))
        else:
            raise ConfigError(f"a LoRA is a path or a (path, strength) pair, not {item!r}")
    return tuple(out)


@dataclass(frozen=True)
class LoraPatch:
    """The change one LoRA makes to one module: a low-rank pair and/or full differences."""

    module: str  # the module name as stored (prefix included), e.g. `base_model.model.blocks.0.self_attn.q`
    down: torch.Tensor | None = field(default=None, repr=False)  # A: [r, in] (conv: [r, in, *kernel])
    up: torch.Tensor | None = field(default=None, repr=False)  # B: [out, r] (conv: [out, r, 1, 1, 1])
    alpha: float | None = None
    diff: torch.Tensor | None = field(default=None, repr=False)  # full weight difference
    diff_b: torch.Tensor | None = field(default=None, repr=False)  # full bias difference

    @property
    def rank(self) -> int | None:
        return None if self.down is None else int(self.down.shape[0])


@dataclass(frozen=True)
class LoraFile:
    """A LoRA read from disk: its patches by stored module name, and how its scale was found."""

    path: str
    format: str  # "peft", "comfyui", "kohya", "diffusers" or "diff" (full differences only)
    container_key: str | None
    patches: dict[str, LoraPatch] = field(repr=False)
    alpha_source: str  # ".alpha tensors", "adapter_config.json", "file metadata" or "none (alpha = rank)"
    rslora: bool = False

    @property
    def name(self) -> str:
        return Path(self.path).name

    def scale(self, patch: LoraPatch) -> float:
        """alpha / rank (rsLoRA: alpha / √rank); 1 when no alpha is known."""
        if patch.rank is None or patch.alpha is None:
            return 1.0
        return patch.alpha / (math.sqrt(patch.rank) if self.rslora else patch.rank)

    def describe(self) -> str:
        ranks = sorted({p.rank for p in self.patches.values() if p.rank is not None})
        alphas = sorted({p.alpha for p in self.patches.values() if p.alpha is not None})
        return (
            f"{self.name}: {self.format} LoRA, {len(self.patches)} modules, rank {'/'.join(map(str, ranks)) or '-'}, "
            f"alpha {'/'.join(f'{a:g}' for a in alphas) or '= rank'} ({self.alpha_source})"
        )


# --- reading ---------------------------------------------------------------------------------------


def _peft_config(path: Path) -> dict | None:
    beside = (path if path.is_dir() else path.parent) / "adapter_config.json"
    if not beside.is_file():
        return None
    try:
        cfg = json.loads(beside.read_text())
    except ValueError as e:
        raise ConfigError(f"'{beside}' is not valid JSON ({e}); fix or remove it") from None
    if not isinstance(cfg, dict) or "lora_alpha" not in cfg or "r" not in cfg:
        return None
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise ConfigError(
            f"'{beside}' sets per-module rank_pattern/alpha_pattern, which is not supported; "
            "merge the adapter with peft (merge_and_unload) and load the merged weights instead"
        )
    return cfg


def _metadata_alpha(metadata: Mapping[str, str]) -> tuple[float, int] | None:
    """(alpha, r) from diffusers' `lora_adapter_metadata` header entry, if a file has one."""
    raw = metadata.get("lora_adapter_metadata")
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        return None
    for prefix in ("", "transformer."):
        if f"{prefix}lora_alpha" in meta and f"{prefix}r" in meta:
            return float(meta[f"{prefix}lora_alpha"]), int(meta[f"{prefix}r"])
    return None


def read_lora(path: str | Path) -> LoraFile:
    """Read a LoRA file (safetensors or `.pt`, or a peft adapter folder) into patches; no model needed."""
    path = Path(path)
    if path.is_dir():
        files = [path / n for n in ("adapter_model.safetensors", "adapter_model.bin") if (path / n).is_file()]
        if not files:
            raise MissingFileError(f"LoRA folder '{path}' has no adapter_model.safetensors; point at the LoRA file")
        path = files[0]
    if not path.exists():
        raise MissingFileError(f"LoRA file '{path}' does not exist; put it in ComfyUI's models/loras")
    src = open_tensor_source(path, LORA_CONTAINER_KEYS)
    name = f"'{path.name}'"
    parts: dict[str, dict] = {}
    adapters: set[str] = set()
    unknown: list[str] = []
    styles: set[str] = set()
    for stored in src.keys():  # noqa: SIM118 (a TensorSource, not a dict)
        key = strip_wrappers(stored)
        if _UNSUPPORTED.search(key):
            raise CheckpointLayoutError(
                f"{name} holds '{stored}': DoRA/LoCon/LoHa/LoKr and LoRA biases are not supported, only plain "
                "LoRA (lora_A/lora_B or lora_down/lora_up) and full diffs"
            )
        if m := _LOW_RANK.match(key):
            which = "down" if (m["ab"] == "A" or m["du"] == "down" or m["du2"] == "down") else "up"
            if m["adapter"]:
                adapters.add(m["adapter"])
            styles.add("peft" if m["ab"] else "down_up")
            parts.setdefault(m["module"], {})[which] = src.get(stored)
        elif m := _SIDE.match(key):
            t = src.get(stored)
            if m["kind"] == "alpha":
                if t.numel() != 1:
                    raise CheckpointLayoutError(
                        f"{name}: '{stored}' should be one number, it has shape {tuple(t.shape)}"
                    )
                parts.setdefault(m["module"], {})["alpha"] = float(t.float().item())
            else:
                parts.setdefault(m["module"], {})[m["kind"]] = t
        else:
            unknown.append(stored)
    if unknown:
        raise CheckpointLayoutError(
            f"{name} has {len(unknown)} keys that are no LoRA weights (e.g. {', '.join(repr(k) for k in unknown[:4])}); "
            "expected <module>.lora_A/lora_B.weight, .lora_down/.lora_up.weight, .alpha, .diff or .diff_b. "
            "Is it a full model? Load that with Load World Model instead."
        )
    if not parts:
        raise CheckpointLayoutError(f"{name} holds no LoRA tensors")
    if len(adapters) > 1:
        raise CheckpointLayoutError(
            f"{name} holds several peft adapters ({', '.join(sorted(adapters))}); save one adapter per file"
        )
    # alpha: per-module tensors, else peft's adapter_config.json, else the file's metadata, else alpha = rank
    has_alpha = any("alpha" in p for p in parts.values())
    cfg = _peft_config(path)
    meta_alpha = _metadata_alpha(src.metadata)
    default_alpha, alpha_source, rslora = None, "none (alpha = rank)", False
    if has_alpha:
        alpha_source = ".alpha tensors"
    elif cfg is not None:
        default_alpha, alpha_source, rslora = (
            float(cfg["lora_alpha"]),
            "adapter_config.json",
            bool(cfg.get("use_rslora")),
        )
    elif meta_alpha is not None:
        default_alpha, alpha_source = meta_alpha[0], "file metadata"
    patches: dict[str, LoraPatch] = {}
    for module, p in parts.items():
        if ("down" in p) != ("up" in p):
            missing = "up (lora_B/lora_up)" if "down" in p else "down (lora_A/lora_down)"
            raise CheckpointLayoutError(f"{name}: module '{module}' has no {missing} weight")
        down, up = p.get("down"), p.get("up")
        if down is not None and (down.dim() < 2 or up.dim() < 2 or up.shape[1] != down.shape[0]):
            raise ShapeMismatchError(
                f"{name}: module '{module}' has A/down {tuple(down.shape)} and B/up {tuple(up.shape)}, whose ranks differ"
            )
        if down is None and "diff" not in p and "diff_b" not in p:
            continue  # an `.alpha` with nothing to scale (some trainers write one per module anyway)
        alpha = p.get("alpha", default_alpha) if down is not None else None
        patches[module] = LoraPatch(module, down, up, alpha, p.get("diff"), p.get("diff_b"))
    fmt = _format_name(patches, styles)
    lora = LoraFile(str(path), fmt, src.container, patches, alpha_source, rslora)
    log.info("read %s", lora.describe())
    return lora


def _format_name(patches: Mapping[str, LoraPatch], styles: set[str]) -> str:
    modules = list(patches)
    if any(m.startswith("lora_unet_") or m.startswith("lora_transformer_") for m in modules):
        return "kohya"
    if any(".attn1." in m or ".attn2." in m or ".ffn.net." in m for m in modules):
        return "diffusers"
    if "down_up" in styles or any(m.startswith("diffusion_model.") for m in modules):
        return "comfyui"
    if "peft" in styles:
        return "peft"
    return "diff"
