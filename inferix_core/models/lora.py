"""LoRA files for causal Wan transformers: read the formats people have, merge them into the weights.

Every format is converted to canonical Wan 2.1 module names (`blocks.0.self_attn.q`, see layouts.py):

* **peft** (the authors' training LoRAs, e.g. LongLive's `lora.pt`): `base_model.model.<module>.lora_A.weight`
  [r, in] and `….lora_B.weight` [out, r], with or without the adapter name (`lora_A.default.weight`),
  bare or under a `generator_lora` key. peft keeps alpha in its config, not in the tensors: it is read
  from an `adapter_config.json` beside the file (`lora_alpha`, `r`, `use_rslora`) when there is one.
* **ComfyUI / Kijai**: `diffusion_model.<module>.lora_down.weight` / `.lora_up.weight` (or `lora_A`/`lora_B`)
  with a scalar `<module>.alpha`, and full differences `<module>.diff` (weight) / `<module>.diff_b` (bias).
* **kohya / musubi-tuner**: `lora_unet_blocks_0_self_attn_q.lora_down.weight` + `.alpha`.
* **diffusers**: `transformer.blocks.0.attn1.to_q.lora_A.weight` (diffusers module names, mapped by layouts.py).

Merging: ``W ← W + strength · scale · (B @ A)`` (+ ``strength · diff``) with ``scale = alpha / rank``, or
``alpha / √rank`` for rsLoRA. Without an alpha anywhere the scale is 1 (alpha = rank): ComfyUI does the
same for a file without `.alpha`, and it is what the LongLive authors train with (`lora_alpha` falls back
to the rank in their `utils/lora_utils.py`; their configs set alpha = rank = 256, 128 for LongLive 2.0).
All deltas of all LoRAs on one weight are summed in float32 and added once; the sum is cast back to the
weight's dtype (or, for fp8 weights with a `scale_weight`, dequantized first and cast to the compute
dtype), so a merged model runs exactly as fast as the base. Keys that match no weight and deltas of the
wrong shape are errors that name them. `.pt` files are read with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointLayoutError, ConfigError, MissingFileError, ShapeMismatchError
from .wan.layouts import from_canonical, strip_wrappers
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


# --- matching the model's weights ---------------------------------------------------------------------


def _aliases(param_names: Iterable[str]) -> dict[str, str]:
    """Every name a LoRA may use for a module or parameter of ours -> its canonical name."""
    out: dict[str, str] = {}
    for key in param_names:
        if key.endswith(".scale_weight"):
            continue
        module = key[: -len(".weight")] if key.endswith(".weight") else None
        if module is None:
            if not key.endswith(".bias"):
                out.setdefault(key, key)  # parameters without a module: blocks.N.modulation (diffs only)
            continue
        names = [module]
        with contextlib.suppress(CheckpointLayoutError):  # no diffusers name: Wan names only
            names.append(from_canonical(key, "diffusers")[: -len(".weight")])
        for n in list(names):
            names += [f"lora_unet_{n.replace('.', '_')}", f"lora_transformer_{n.replace('.', '_')}"]
        for n in names:
            out.setdefault(n, module)
    return out


def _resolve(stored: str, aliases: Mapping[str, str]) -> str | None:
    name = stored
    while True:
        if name in aliases:
            return aliases[name]
        prefix = next((p for p in MODULE_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            return None
        name = name[len(prefix) :]


def match_lora(lora: LoraFile, param_names: Iterable[str]) -> dict[str, str]:
    """Stored module name -> canonical module/parameter name; raises naming the modules that match nothing."""
    names = list(param_names)
    aliases = _aliases(names)
    matched, unmatched = {}, []
    for module in lora.patches:
        target = _resolve(module, aliases)
        if target is None:
            unmatched.append(module)
        else:
            matched[module] = target
    if unmatched:
        example = next((n[: -len(".weight")] for n in names if n.startswith("blocks.0.") and n.endswith(".weight")), "")
        raise CheckpointLayoutError(
            f"LoRA '{lora.name}': {len(unmatched)} of its {len(lora.patches)} modules match no weight of this model "
            f"(e.g. {', '.join(repr(m) for m in unmatched[:4])}). It is a LoRA for another model (an I2V or "
            f"Wan 2.2 LoRA on a T2V Wan 2.1 model?) or a key layout we don't read; this model's modules are named "
            f"like '{example}'."
        )
    return matched


# --- merging -------------------------------------------------------------------------------------------


def _low_rank_delta(patch: LoraPatch, shape: torch.Size, device: torch.device, where: str) -> torch.Tensor:
    up = patch.up.to(device=device, dtype=torch.float32).flatten(1)
    down = patch.down.to(device=device, dtype=torch.float32).flatten(1)
    if up.shape[0] != shape[0] or down.shape[1] != math.prod(shape[1:]):
        raise ShapeMismatchError(
            f"{where}: the LoRA's B @ A is {tuple(patch.up.shape[:1]) + tuple(patch.down.shape[1:])} "
            f"(B {tuple(patch.up.shape)}, A {tuple(patch.down.shape)}) but the model's weight is {tuple(shape)}: "
            "it is a LoRA for another model size (e.g. Wan 14B vs 1.3B)"
        )
    return (up @ down).reshape(shape)


def _full_delta(diff: torch.Tensor, shape: torch.Size, device: torch.device, where: str) -> torch.Tensor:
    if tuple(diff.shape) != tuple(shape):
        if diff.numel() != math.prod(shape):
            raise ShapeMismatchError(
                f"{where}: the LoRA's diff is {tuple(diff.shape)} but the model's tensor is {tuple(shape)}: "
                "it is a LoRA for another model"
            )
        diff = diff.reshape(shape)
    return diff.to(device=device, dtype=torch.float32)


def _dequantized(state: Mapping[str, torch.Tensor], key: str, device: torch.device) -> torch.Tensor:
    """The float32 value a stored tensor stands for (fp8 with `scale_weight`: weight · scale)."""
    t = state[key].to(device)
    if t.dtype not in FP8_DTYPES:
        return t.float()
    scale_key = key.removesuffix("weight") + "scale_weight"
    scale = state[scale_key].to(device).float() if scale_key in state else torch.ones((), device=device)
    if scale.numel() > 1:  # per-output-channel scales
        scale = scale.reshape(-1, *([1] * (t.dim() - 1)))
    return t.float() * scale


def merge_loras(
    state: Mapping[str, torch.Tensor],
    loras: Sequence[tuple[LoraFile, float]],
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> dict[str, torch.Tensor]:
    """A new state dict with every LoRA merged; tensors no LoRA touches are the same objects as in `state`.

    Args:
        state: canonical Wan state dict (fp32/fp16/bf16, or fp8 weights with `<layer>.scale_weight`).
        loras: (LoRA, strength) pairs; they stack (their deltas add up).
        dtype: dtype of merged fp8 weights (the model's compute dtype); other tensors keep their dtype.
        device: where the float32 arithmetic runs (the model's device is fastest); results go back to
            each tensor's own device.
    """
    out = dict(state)
    # 1. check everything first (names, shapes of the low-rank pairs are checked when computed), grouped by
    #    the tensor they change, so that one tensor's float32 sum is alive at a time (a 14B model's deltas
    #    at once would double its memory)
    jobs: dict[str, list[tuple[str, LoraFile, LoraPatch, float, str]]] = {}
    for lora, strength in loras:
        targets = match_lora(lora, state.keys())  # validates even at strength 0
        if strength == 0:
            log.info("LoRA %s at strength 0: not merged", lora.name)
            continue
        for stored, target in targets.items():
            patch = lora.patches[stored]
            where = f"LoRA '{lora.name}', module '{stored}' → '{target}'"
            weight_key = target if target in state else f"{target}.weight"
            if weight_key not in state:
                raise CheckpointLayoutError(f"{where}: the model has no '{weight_key}'")
            if patch.down is not None or patch.diff is not None:
                jobs.setdefault(weight_key, []).append(("weight", lora, patch, strength, where))
            if patch.diff_b is not None:
                bias_key = f"{target}.bias"
                if bias_key not in state:
                    raise CheckpointLayoutError(f"{where}: the LoRA has a bias diff but the model's layer has no bias")
                jobs.setdefault(bias_key, []).append(("bias", lora, patch, strength, where))
    # 2. one tensor at a time: Σ deltas in float32, added once, cast back once
    for key, parts in jobs.items():
        original = state[key]
        dev = torch.device(device) if device is not None else original.device
        delta = torch.zeros(original.shape, dtype=torch.float32, device=dev)
        for kind, lora, patch, strength, where in parts:
            if kind == "bias":
                delta += strength * _full_delta(patch.diff_b, original.shape, dev, where)
                continue
            if patch.down is not None:
                delta += strength * lora.scale(patch) * _low_rank_delta(patch, original.shape, dev, where)
            if patch.diff is not None:
                delta += strength * _full_delta(patch.diff, original.shape, dev, where)
        merged = _dequantized(state, key, dev) + delta
        del delta
        if original.dtype in FP8_DTYPES:
            if dtype is None:
                raise ConfigError(f"'{key}' is stored in fp8: pass the compute dtype to merge a LoRA into it")
            out[key] = merged.to(device=original.device, dtype=dtype)
            out.pop(key.removesuffix("weight") + "scale_weight", None)
        else:
            out[key] = merged.to(device=original.device, dtype=original.dtype)
    if jobs:
        log.info("merged %d LoRA(s) into %d tensors", sum(1 for _, s in loras if s != 0), len(jobs))
    return out


def merge_lora_files(
    state: Mapping[str, torch.Tensor],
    loras: Iterable[LoraArg] | None,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> dict[str, torch.Tensor]:
    """`merge_loras` for file arguments (paths, `(path, strength)` pairs or `LoraSpec`s)."""
    return merge_loras(state, read_loras(loras), dtype=dtype, device=device)


def read_loras(loras: Iterable[LoraArg | tuple[LoraFile, float]] | None) -> list[tuple[LoraFile, float]]:
    """(LoraFile, strength) pairs for `lora=` arguments; already read files pass through."""
    out = []
    for item in loras or ():
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], LoraFile):
            out.append((item[0], float(item[1])))
        else:
            (spec,) = as_lora_specs([item])
            out.append((read_lora(spec.path), spec.strength))
    return out


# --- whole models ------------------------------------------------------------------------------------------


def _plain_state(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The transformer's state with fp8 block linears dequantized (so a fresh module can take it)."""
    from .fp8 import FP8Linear

    state = dict(transformer.state_dict(keep_vars=False))
    dtype = transformer.patch_embedding.weight.dtype
    for name, module in transformer.named_modules():
        if isinstance(module, FP8Linear):
            state[f"{name}.weight"] = module.dequantized_weight().to(dtype)
            state.pop(f"{name}.weight_scale", None)
    return state


def merge_loras_into_transformer(
    transformer: torch.nn.Module, loras: Iterable[LoraArg | tuple[LoraFile, float]]
) -> torch.nn.Module:
    """A new transformer with the LoRAs merged; `transformer` is left untouched (ComfyUI caches it).

    Untouched tensors are shared with the input, so only the merged weights take new memory. The copy
    keeps the input's attention backend; an input in fp8 mode is merged into its dequantized weights and
    quantized again (merging before fp8, with `load_world_model(lora=...)`, avoids that second rounding),
    and an input with compiled blocks gets compiled blocks.
    """
    from .fp8 import count_fp8_linears, quantize_linears_fp8
    from .wan.causal_transformer import CausalWanTransformer, compile_blocks

    device = next(transformer.parameters()).device
    merged = merge_loras(_plain_state(transformer), read_loras(loras), device=device)
    with torch.device("meta"):
        new = CausalWanTransformer(transformer.config)
    new.load_state_dict(merged, strict=True, assign=True)
    new = new.eval().requires_grad_(False)
    originals = dict(transformer.named_modules())
    for name, module in new.named_modules():
        if hasattr(module, "attend") and name in originals:
            module.attend = originals[name].attend
    new.sequence_parallel = getattr(transformer, "sequence_parallel", None)
    if count_fp8_linears(transformer):
        log.warning("the model is in fp8 mode: the LoRA is merged into its dequantized weights and re-quantized")
        quantize_linears_fp8(new)
    if any(getattr(b, "_compiled_call_impl", None) is not None for b in transformer.blocks):
        compile_blocks(new)
    old_graphs = getattr(transformer, "cuda_graphs", None)
    if old_graphs is not None:  # the merged copy gets graphs of its own (a fresh backend of the same kind)
        from .wan.cuda_graphs import enable_cuda_graphs

        enable_cuda_graphs(new, type(old_graphs.backend)())
    return new


def apply_loras(world_model, loras: Iterable[LoraArg | tuple[LoraFile, float]]):
    """A new `WorldModel` whose transformer has the LoRAs merged (the input model is not changed)."""
    read = read_loras(loras)
    if not read:
        return world_model
    transformer = merge_loras_into_transformer(world_model.transformer, read)
    source = f"{world_model.source} + LoRA {', '.join(f'{f.name}:{s:g}' for f, s in read)}"
    return dataclasses.replace(world_model, transformer=transformer, source=source)


def lora_label(loras: Iterable[LoraArg] | None) -> str:
    """' + LoRA a.safetensors:1, b.pt:0.5' for a model's source line ('' without LoRAs)."""
    specs = as_lora_specs(loras)
    return f" + LoRA {', '.join(s.label for s in specs)}" if specs else ""
