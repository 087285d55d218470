"""Which causal Wan family a weights file belongs to, from its content first and its name last.

Every released causal Wan 2.1 model has the same tensors, so no single key tells them apart. The
evidence is read in this order, and the first rule that recognises something decides:

1. ``weights``   shapes and keys of the tensors (Wan 2.1 14B T2V dims → Krea Realtime 14B; Wan 2.1 I2V's
   image cross-attention → wan21_i2v; other families, e.g. action-conditioned ones, register their own rule here);
2. ``metadata``  a family named in the safetensors header (``inferix_family``/``family``, or a fixture's ``info``);
3. ``config``    a ``config.json`` or the authors' training/inference YAML beside the file;
4. ``lora``      the authors' LoRA beside the file (LongLive ships ``lora.pt`` with ``generator_lora``);
5. ``checkpoint keys`` a training checkpoint holding ``generator`` but no ``generator_ema`` (CausVid's layout);
6. ``file name`` the file's name and its two parent folders (``causvid``, ``framewise/causal_forcing.pt``);
7. ``checkpoint keys`` ``generator`` + ``generator_ema``: the Self-Forcing layout (its descendants share it).

Nothing matched: Self-Forcing, with a reason that says so ("no family evidence; …") and a warning,
never silently. Rules are data: ``register_rule(stage, rule)`` adds one (a rule returns a reason or None).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .wan.config import WanConfig

log = logging.getLogger(__name__)

DEFAULT_FAMILY = "self_forcing"
STAGES = ("weights", "metadata", "config", "lora", "checkpoint keys", "file name", "checkpoint layout")
_MAX_SIDECAR_BYTES = 1 << 20  # a config beside the weights is small; anything bigger is not one
_MAX_SIDECARS = 16


@dataclass(frozen=True)
class FileFacts:
    """What detection may look at: gathered once, without converting a tensor."""

    path: Path
    config: WanConfig
    canonical_keys: frozenset[str]
    top_level_keys: tuple[str, ...] = ()  # a torch checkpoint's dicts (generator, generator_ema, critic, …)
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FamilyChoice:
    """The family picked and why, in one line (printed by the node and `inferix info`)."""

    family: str
    reason: str
    stage: str  # one of STAGES, "argument" or "default"


# A rule returns (family, reason) or None.
Rule = Callable[[FileFacts], "tuple[str, str] | None"]
_RULES: dict[str, list[Rule]] = {stage: [] for stage in STAGES}


def register_rule(stage: str, rule: Rule | None = None):
    """Add a detection rule to a stage (also as `@register_rule(stage)`); later stages run only if earlier are silent."""
    if stage not in _RULES:
        raise ValueError(f"unknown detection stage '{stage}'; expected one of {STAGES}")
    if rule is None:
        return lambda fn: register_rule(stage, fn)
    _RULES[stage].append(rule)
    return rule


def detect_family(facts: FileFacts, known: Mapping[str, object]) -> FamilyChoice:
    """Run the rules stage by stage; the first (family, reason) naming a family in `known` wins."""
    for stage in STAGES:
        for rule in _RULES[stage]:
            found = rule(facts)
            if found is not None and found[0] in known:
                return FamilyChoice(found[0], found[1], stage)
    reason = (
        f"no family evidence in '{facts.path.name}' (weights, metadata, config or LoRA beside, name); "
        f"using {DEFAULT_FAMILY} — set family=... (one of {', '.join(k for k in known if k != 'bundled')}) "
        "if it is another"
    )
    log.warning(reason)
    return FamilyChoice(DEFAULT_FAMILY, reason, "default")


# --- 1. weights ------------------------------------------------------------------------------------


@register_rule("weights")
def _wan_14b(f: FileFacts):
    c = f.config
    if (c.dim, c.num_layers, c.ffn_dim) == (5120, 40, 13824) and c.model_type == "t2v" and not c.action_dim:
        return "krea", "Wan 2.1 14B dims (dim 5120, 40 layers, ffn 13824): Krea Realtime 14B is the causal 14B release"
    return None


@register_rule("weights")
def _matrix_game2(f: FileFacts):
    if getattr(f.config, "action_config", None) is not None:
        return "matrix_game2", "action modules in the weights (blocks.N.action_model.*): Matrix-Game 2.0"
    return None


@register_rule("weights")
def _wan21_i2v(f: FileFacts):
    c = f.config
    if c.has_image_input and c.model_type == "i2v" and getattr(c, "action_config", None) is None:
        return "wan21_i2v", (
            f"Wan 2.1 I2V weights (img_emb over {c.clip_dim}-wide CLIP tokens, cross_attn.k_img/v_img in all "
            f"{c.num_layers} blocks, in_dim {c.in_dim}; dim {c.dim})"
        )
    return None


@register_rule("weights")
def _wan22_ti2v(f: FileFacts):
    if f.config.model_type == "ti2v" or (f.config.in_dim == 48 and f.config.out_dim == 48):
        return "longlive2", "Wan 2.2 TI2V-5B weights (48 latent channels): LongLive 2.0 is the causal release on it"
    return None


# --- 2. metadata -----------------------------------------------------------------------------------

_REPO_FAMILY = {
    "guandeh17/self-forcing": "self_forcing",
    "tianweiy/causvid": "causvid",
    "nvlabs/longlive": "longlive",
    "krea-ai/realtime-video": "krea",
}


@register_rule("metadata")
def _metadata_family(f: FileFacts):
    for key in ("inferix_family", "family"):
        if key in f.metadata:
            return f.metadata[key], f"the file's metadata says {key}={f.metadata[key]}"
    try:
        info = json.loads(f.metadata.get("info", "{}"))
    except ValueError:
        return None
    if isinstance(info, dict) and isinstance(info.get("family"), str):
        return info["family"], f"the file's metadata (info.family) says {info['family']}"
    return None


# --- 3. a config beside the file -------------------------------------------------------------------


def sidecar_configs(path: Path, what: str = "family detection") -> list[tuple[Path, dict]]:
    """config.json / *.yaml beside the weights (small files only), parsed; unreadable ones are skipped with a log."""
    folder = path if path.is_dir() else path.parent
    out: list[tuple[Path, dict]] = []
    candidates = sorted(folder.glob("*.json")) + sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    for p in candidates[:_MAX_SIDECARS]:
        if p.name.endswith(".index.json") or not p.is_file() or p.stat().st_size > _MAX_SIDECAR_BYTES:
            continue
        try:
            if p.suffix == ".json":
                data = json.loads(p.read_text())
            else:
                import yaml  # PyYAML comes with transformers

                data = yaml.safe_load(p.read_text())
        except Exception as e:  # a broken side file is no evidence, but it is said
            log.info("%s: ignoring '%s' (%s)", what, p.name, str(e).splitlines()[0] if str(e) else e)
            continue
        if isinstance(data, dict):
            out.append((p, data))
    return out


def recache_style_beside(path: Path, family: str) -> str | None:
    """The re-cache a LongLive config beside the weights asks for: `global_sink` true → "window", false →
    "window_reset" (their `_recache_after_switch`; docs/longlive_global_sink.md), logged; None without one."""
    if family != "longlive":
        return None
    for p, cfg in sidecar_configs(path, "re-cache settings"):
        if "global_sink" in cfg:
            style = "window" if cfg["global_sink"] else "window_reset"
            log.info("'%s' sets global_sink: %s: prompt switches re-cache with '%s'", p.name, cfg["global_sink"], style)
            return style
    return None


def _config_family(cfg: Mapping) -> tuple[str, str] | None:
    """Recognise a family by keys only its authors' configs have."""
    kwargs = cfg.get("model_kwargs") or {}
    steps = list(cfg.get("denoising_step_list") or [])
    if isinstance(cfg.get("family"), str):
        return cfg["family"], f"family={cfg['family']}"
    if "kv_cache_num_frames" in cfg or "do_kv_recomp" in cfg:
        return "krea", "do_kv_recomp/kv_cache_num_frames (krea-ai/realtime-video configs)"
    if "global_sink" in cfg or ("lora_ckpt" in cfg and "local_attn_size" in kwargs):
        return "longlive", "global_sink / lora_ckpt with a local window (NVlabs/LongLive configs)"
    if cfg.get("denoising_step_list_first_chunk") is not None and cfg.get("num_frame_per_block") == 1:
        n = len([s for s in steps if s])
        return f"causal_forcing_framewise_{n}step", (
            f"denoising_step_list_first_chunk with {n}-step frame-wise blocks (thu-ml/Causal-Forcing++ configs)"
        )
    if cfg.get("timestep_shift") == 8.0 and str(cfg.get("generator_name", "")).startswith("causal_wan"):
        return "causvid", "timestep_shift 8.0 with generator_name causal_wan (tianweiy/CausVid configs)"
    if cfg.get("num_frame_per_block") == 1 and steps:
        return "causal_forcing_framewise", "num_frame_per_block: 1 (thu-ml/Causal-Forcing frame-wise configs)"
    return None


def family_from_settings(settings: Mapping, model_config: Mapping | None = None) -> tuple[str, str] | None:
    """(family, reason) from a run's settings (the authors' inference config, or a fixture's `info.pipeline`) and
    its model config, by keys only one family's code has; None when they fit several (Self-Forcing's layout)."""
    found = _config_family(settings)
    window_keys = ("local_attn_size", "sink_size")
    if found is None and model_config and "dim" in model_config and not any(k in model_config for k in window_keys):
        return "causvid", "a CausalWanModel config without local_attn_size/sink_size (tianweiy/CausVid's class)"
    return found


@register_rule("config")
def _config_beside(f: FileFacts):
    for p, cfg in sidecar_configs(f.path):
        found = _config_family(cfg)
        if found is not None:
            return found[0], f"'{p.name}' beside it has {found[1]}"
    return None


# --- 4. the authors' LoRA beside the file ------------------------------------------------------------


def _top_keys(path: Path) -> tuple[str, ...]:
    """Top-level keys of a torch file, memory-mapped (no tensor is read, no pickled code runs)."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return ()
    return tuple(str(k) for k in obj) if isinstance(obj, Mapping) else ()


@register_rule("lora")
def _longlive_lora_beside(f: FileFacts):
    folder = f.path if f.path.is_dir() else f.path.parent
    for p in sorted(folder.glob("*.pt"))[:_MAX_SIDECARS]:
        if p != f.path and "lora" in p.name.lower() and "generator_lora" in _top_keys(p):
            return (
                "longlive",
                f"'{p.name}' beside it holds 'generator_lora' (LongLive ships longlive_base.pt + lora.pt)",
            )
    return None


# --- 5./7. training-checkpoint keys ------------------------------------------------------------------


@register_rule("checkpoint keys")
def _generator_without_ema(f: FileFacts):
    top = set(f.top_level_keys)
    if "generator" in top and "generator_ema" not in top and "generator_lora" not in top:
        return "causvid", (
            f"a training checkpoint with 'generator' and no 'generator_ema' (holds {sorted(top)}): CausVid's "
            "layout (causvid/train_distillation.py saves generator + critic)"
        )
    return None


@register_rule("checkpoint layout")
def _generator_ema(f: FileFacts):
    if "generator_ema" in f.top_level_keys:
        return "self_forcing", (
            "a training checkpoint with 'generator_ema': Self-Forcing's layout (self_forcing_dmd.pt); LongLive and "
            "Causal-Forcing checkpoints look the same, so name the file or set family=... for those"
        )
    return None


# --- 6. file name ------------------------------------------------------------------------------------

# (words that must all appear, family); the first row that matches wins, so specific rows come first.
NAME_RULES: list[tuple[tuple[str, ...], str]] = [
    (("causal_forcing", "framewise", "2step"), "causal_forcing_framewise_2step"),
    (("causal_forcing", "framewise", "1step"), "causal_forcing_framewise_1step"),
    (("causal_forcing", "framewise"), "causal_forcing_framewise"),
    (("causal_forcing", "chunkwise"), "causal_forcing_chunkwise"),
    (("causal_forcing",), "causal_forcing_chunkwise"),
    (("self_forcing",), "self_forcing"),
    (("causvid",), "causvid"),
    (("longlive",), "longlive"),
    (("krea",), "krea"),
]


def _name_words(path: Path) -> str:
    parts = [path.name, *(p.name for p in list(path.parents)[:2])]
    text = "/".join(parts).lower().replace("-", "_").replace("selfforcing", "self_forcing")
    return (
        text.replace("causalforcing", "causal_forcing")
        .replace("frame_wise", "framewise")
        .replace("chunk_wise", "chunkwise")
    )


@register_rule("file name")
def _file_name(f: FileFacts):
    text = _name_words(f.path)
    for words, family in NAME_RULES:
        if all(w in text for w in words):
            why = f"the name '{text}' contains {'+'.join(words)}"
            if words == ("causal_forcing",):
                why += " (neither framewise nor chunkwise: taking the chunk-wise model; set family=... otherwise)"
            return family, why
    return None
