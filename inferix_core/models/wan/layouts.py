"""Key layouts of Wan 2.1 transformer weight files, and the maps between them and our canonical names.

Canonical names are the original Wan 2.1 names (`blocks.0.self_attn.q.weight`, `head.head.weight`, …),
which are also the parameter names of `CausalWanTransformer`. This module only looks at key strings:
reading tensors, dtypes and configs is checkpoint.py's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import CheckpointLayoutError

# Layout names, by how keys are spelled in the file (not by which program wrote it):
#   "wan"          bare canonical keys: original Wan .pth/.safetensors, and ComfyUI models/diffusion_models
#                  files saved without a prefix (the common case for Comfy-Org repackaged files)
#   "comfyui"      canonical keys under `model.diffusion_model.` (full ComfyUI checkpoint state dicts)
#   "diffusers"    WanTransformer3DModel names (`condition_embedder.*`, `blocks.0.attn1.to_q`, …)
#   "self_forcing" training checkpoints (Self-Forcing, CausVid, LongLive): `model.` + canonical keys,
#                  usually inside a `.pt` dict under `generator_ema` / `generator` / `model`
#   "fixture"      our test fixtures: `weights.` + canonical keys next to non-weight tensors
LAYOUTS = ("wan", "comfyui", "diffusers", "self_forcing", "fixture")
EXPECTED_LAYOUTS_TEXT = (
    "Expected ComfyUI (model.diffusion_model.* or bare keys), Wan (.pth), diffusers (WanTransformer3DModel) "
    "or Self-Forcing/CausVid/LongLive (.pt) layout."
)

PROBE_KEY = "patch_embedding.weight"  # the same name in every layout; its prefix tells the layout
DIFFUSERS_PROBE = "condition_embedder.time_embedder.linear_1.weight"

# Training checkpoints nest the generator's state dict; the first one present wins (EMA weights are
# what Self-Forcing and CausVid ship for inference).
CONTAINER_KEYS = ("generator_ema", "generator", "model")

# Dotted segments that wrappers insert into parameter names (FSDP, activation checkpointing,
# torch.compile); they carry no meaning for the weights and are dropped wherever they appear.
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})

PREFIX_LAYOUT = {
    "model.diffusion_model.": "comfyui",
    "diffusion_model.": "comfyui",
    "model.": "self_forcing",
    "weights.": "fixture",
}

# Canonical (Wan) module path ↔ diffusers module path. Our own table, written from the renames in
# diffusers scripts/convert_wan_to_diffusers.py (TRANSFORMER_KEYS_RENAME_DICT) and
# src/diffusers/loaders/single_file_utils.py (convert_wan_transformer_to_diffusers). Two traps:
# Wan's affine cross-attention norm is `norm3` but diffusers calls it `norm2` (diffusers numbers the
# norms in call order), and both `head.modulation` and `blocks.N.modulation` become `scale_shift_table`.
DIFFUSERS_TOP = (
    ("time_embedding.0", "condition_embedder.time_embedder.linear_1"),
    ("time_embedding.2", "condition_embedder.time_embedder.linear_2"),
    ("text_embedding.0", "condition_embedder.text_embedder.linear_1"),
    ("text_embedding.2", "condition_embedder.text_embedder.linear_2"),
    ("time_projection.1", "condition_embedder.time_proj"),
    ("head.modulation", "scale_shift_table"),
    ("head.head", "proj_out"),
    ("img_emb.proj.0", "condition_embedder.image_embedder.norm1"),
    ("img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"),
    ("img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"),
    ("img_emb.proj.4", "condition_embedder.image_embedder.norm2"),
    ("img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"),
    ("patch_embedding", "patch_embedding"),
    ("action_embedding", "action_embedding"),  # our extension keeps its name in every layout
)
DIFFUSERS_BLOCK = (  # inside `blocks.N.`
    ("modulation", "scale_shift_table"),
    ("self_attn.q", "attn1.to_q"),
    ("self_attn.k", "attn1.to_k"),
    ("self_attn.v", "attn1.to_v"),
    ("self_attn.o", "attn1.to_out.0"),
    ("self_attn.norm_q", "attn1.norm_q"),
    ("self_attn.norm_k", "attn1.norm_k"),
    ("cross_attn.q", "attn2.to_q"),
    ("cross_attn.k", "attn2.to_k"),
    ("cross_attn.v", "attn2.to_v"),
    ("cross_attn.o", "attn2.to_out.0"),
    ("cross_attn.norm_q", "attn2.norm_q"),
    ("cross_attn.norm_k", "attn2.norm_k"),
    ("cross_attn.k_img", "attn2.add_k_proj"),
    ("cross_attn.v_img", "attn2.add_v_proj"),
    ("cross_attn.norm_k_img", "attn2.norm_added_k"),
    ("norm3", "norm2"),
    ("ffn.0", "ffn.net.0.proj"),
    ("ffn.2", "ffn.net.2"),
)
# Diffusers keys with no parameters of ours: RoPE tables (buffers in some diffusers versions).
DIFFUSERS_DROPPED = re.compile(r"^rope\.")

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class KeyLayout:
    """What `analyse_keys` found: the layout name, the prefix before the canonical names, and the naming
    scheme under it ("wan" or "diffusers")."""

    layout: str
    prefix: str
    naming: str


def strip_wrappers(key: str) -> str:
    """Drop FSDP/checkpoint/compile wrapper segments and a leading DDP `module.` from one key."""
    parts = [p for p in key.split(".") if p not in WRAPPER_SEGMENTS]
    if parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


def _rename(path: str, table: tuple[tuple[str, str], ...], src: int) -> str | None:
    """Replace the longest table entry that is a whole-segment prefix of `path`; None if none is."""
    best: tuple[str, str] | None = None
    for pair in table:
        name = pair[src]
        if (path == name or path.startswith(name + ".")) and (best is None or len(name) > len(best[src])):
            best = pair
    if best is None:
        return None
    return best[1 - src] + path[len(best[src]) :]


def to_canonical(key: str, naming: str) -> str | None:
    """Map one key (prefix already stripped) to its canonical name; None if it is no parameter of ours."""
    if naming == "wan":
        return key
    if DIFFUSERS_DROPPED.match(key):
        return None
    m = _BLOCK.match(key)
    if m:
        rest = _rename(m.group(2), DIFFUSERS_BLOCK, src=1)
        return None if rest is None else f"blocks.{m.group(1)}.{rest}"
    return _rename(key, DIFFUSERS_TOP, src=1)


def from_canonical(key: str, naming: str) -> str:
    """Inverse of `to_canonical`, used when saving in another layout."""
    if naming == "wan":
        return key
    m = _BLOCK.match(key)
    rest = _rename(m.group(2), DIFFUSERS_BLOCK, src=0) if m else None
    out = f"blocks.{m.group(1)}.{rest}" if m and rest is not None else _rename(key, DIFFUSERS_TOP, src=0)
    if out is None:
        raise CheckpointLayoutError(f"no diffusers name for canonical key '{key}'")
    return out


def _examples(keys: Iterable[str], n: int = 4) -> str:
    ks = sorted(keys)
    shown = ", ".join(f"'{k}'" for k in ks[:n])
    return shown + (f", … ({len(ks)} keys)" if len(ks) > n else "")


# Files that belong in another ComfyUI folder, recognised by key patterns after common prefixes are
# removed: (description, pattern that must match some key, advice).
_FOREIGN = (
    (
        "a LoRA (keys *lora_A/lora_B/lora_down/lora_up*)",
        re.compile(r"lora_(A|B|down|up)\b|\.lora\."),
        "load the base model and add this file with the Load World Model LoRA node (models/loras) or --lora FILE",
    ),
    (
        "a Wan VAE (keys encoder.*, decoder.*)",
        re.compile(r"^decoder\.(conv1|conv_in|upsamples|up_blocks)"),
        "put it in models/vae",
    ),
    (
        "a umT5 text encoder (keys encoder.block.*, shared.weight)",
        re.compile(r"^(encoder\.block\.\d+\.layer|shared\.weight$|token_embedding\.weight$)"),
        "put it in models/text_encoders",
    ),
    (
        "a CLIP vision encoder (keys visual.*/vision_model.*)",
        re.compile(r"^(visual\.|vision_model\.|log_scale$)"),
        "put it in models/clip_vision",
    ),
)
_COMMON_PREFIXES = ("model.diffusion_model.", "first_stage_model.", "weights.", "vae.", "model.", "text_encoder.")


def describe_foreign(keys: Iterable[str]) -> str | None:
    """Return 'looks like X; advice' when the keys belong to another kind of model, else None."""
    stripped = []
    for k in keys:
        for p in _COMMON_PREFIXES:
            if k.startswith(p):
                k = k[len(p) :]
                break
        stripped.append(k)
    for what, pattern, advice in _FOREIGN:
        if any(pattern.search(k) for k in stripped):
            return f"looks like {what}; {advice}"
    return None


def analyse_keys(keys: Iterable[str], source: str = "state dict", container: str | None = None) -> KeyLayout:
    """Find the prefix in front of `patch_embedding.weight` and the naming below it.

    Keys must already have wrapper segments removed (`strip_wrappers`); `container` names the dict of a
    training checkpoint they came from (`generator_ema`), for the error message. Raises CheckpointLayoutError
    naming `source`, a few keys found and the supported layouts when no Wan transformer is recognised.
    """
    keys = list(keys)
    prefixes = sorted({k[: -len(PROBE_KEY)] for k in keys if k.endswith(PROBE_KEY)}, key=len)
    prefixes = [p for p in prefixes if p == "" or p.endswith(".")]
    if not prefixes:
        raise CheckpointLayoutError(_unknown_message(keys, source, container))
    if len(prefixes) > 1:
        raise CheckpointLayoutError(
            f"{source} holds more than one transformer (patch_embedding.weight under prefixes "
            f"{', '.join(repr(p) for p in prefixes)}); save the one you want on its own."
        )
    prefix = prefixes[0]
    naming = "diffusers" if prefix + DIFFUSERS_PROBE in keys else "wan"
    first = prefix.split(".", 1)[0]
    if prefix in PREFIX_LAYOUT:
        layout = PREFIX_LAYOUT[prefix]
    elif first in CONTAINER_KEYS:
        layout = "self_forcing"
    elif prefix in ("", "transformer."):
        layout = naming
    else:
        raise CheckpointLayoutError(
            f"{source} has patch_embedding.weight under the unknown prefix '{prefix}'. {EXPECTED_LAYOUTS_TEXT}"
        )
    return KeyLayout(layout=layout, prefix=prefix, naming=naming)


def _unknown_message(keys: list[str], source: str, container: str | None) -> str:
    if not keys:
        return f"{source} holds no tensors. {EXPECTED_LAYOUTS_TEXT}"
    foreign = describe_foreign(keys)
    if foreign:
        return f"{source} is not a Wan transformer: it {foreign} (found {_examples(keys)})."
    containers = [container] if container else sorted({k.split(".", 1)[0] for k in keys} & set(CONTAINER_KEYS))
    if containers:
        return (
            f"{source} has keys under '{containers[0]}.' but no '{PROBE_KEY}' below them "
            f"(found {_examples(keys)}). {EXPECTED_LAYOUTS_TEXT}"
        )
    return f"{source} has no '{PROBE_KEY}' under any known prefix (found {_examples(keys)}). {EXPECTED_LAYOUTS_TEXT}"


def detect_layout(keys: Iterable[str], source: str = "state dict") -> str:
    """Name the layout of a flat key list: one of LAYOUTS, or CheckpointLayoutError saying what was found.

    Bare canonical keys report "wan" whether they came from an original Wan .pth or a ComfyUI
    models/diffusion_models file: the names are identical. Flattened training checkpoints
    (`generator_ema.model.blocks…`) report "self_forcing".
    """
    return analyse_keys([strip_wrappers(k) for k in keys], source).layout
