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
import logging
import math
from collections.abc import Iterable, Mapping, Sequence

import torch

from ..errors import CheckpointLayoutError, ConfigError, ShapeMismatchError
from .lora_files import (
    FP8_DTYPES,
    LORA_CONTAINER_KEYS,
    MODULE_PREFIXES,
    LoraArg,
    LoraFile,
    LoraPatch,
    LoraSpec,
    as_lora_specs,
    parse_lora_arg,
    read_lora,
)
from .wan.layouts import from_canonical

log = logging.getLogger(__name__)

__all__ = [
    "LORA_CONTAINER_KEYS",
    "LoraArg",
    "LoraFile",
    "LoraPatch",
    "LoraSpec",
    "apply_loras",
    "as_lora_specs",
    "lora_label",
    "match_lora",
    "merge_lora_files",
    "merge_loras",
    "merge_loras_into_transformer",
    "parse_lora_arg",
    "read_lora",
]


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
