"""InferixWorldModelFromCoreModel: a core ComfyUI `MODEL` (causal Wan 2.1) as an Inferix world model.

Core ComfyUI loads causal Wan checkpoints as a ModelPatcher: `WAN21_CausalAR` (comfy/ldm/wan/ar_model.py,
v0.21.0 on; a file whose metadata says `causal_ar`) or a plain `WAN21` (any Wan 2.1 T2V file, e.g. a
Self-Forcing checkpoint without that metadata). Both have the original Wan weight names. This node takes
the patcher's weights *with its patches applied* (core LoRA loaders, model merges: exactly what ComfyUI
itself computes, `comfy.lora.calculate_weight` over `get_key_patches`, fp8 scales through each weight's own
`convert_func`), without moving or modifying the patcher, and builds our world model from them
(`inferix_core.models.state_dict`), so our block loop, KV-cache kinds, streaming and live previews run.

What a MODEL can carry that is not weights (model patches that change the forward, object patches,
wrappers, hooks, a sampler function) our engine cannot honour; the node refuses such a MODEL and names
what to remove. The one exception is a `model_sampling` object patch (ModelSamplingSD3 / ...Flow): its
flow `shift` becomes the sampling shift, with a log line.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from inferix_core.attention.registry import attention_backends
from inferix_core.errors import ConfigError

from . import comfy_runtime as rt
from . import types
from .compat import io
from .core_interop import wan_vae_from_core

log = logging.getLogger(__name__)

NONE = "none"
DTYPES = ["auto", "fp32", "bf16", "fp16"]
PREFIX = "diffusion_model."
# core model classes (comfy/model_base.py) whose diffusion_model is a Wan 2.1 transformer we can run
WAN_MODEL_CLASSES = {"WAN21", "WAN21_CausalAR"}
# side tensors that ComfyUI's convert_func has already applied (fp8 scales) or that carry no weight
_SIDE_KEYS = re.compile(r"\.(scale_weight|weight_scale|scale_input|input_scale|comfy_quant)$|(^|\.)scaled_fp8$")
# model_options entries that change nothing we run
_HARMLESS_OPTIONS = {"disable_cfg1_optimization"}


def _families() -> list[str]:
    from inferix_core.models.registry import list_families

    return [f for f in list_families() if f != "bundled"]


def _nonempty(value: Any) -> bool:
    """True when a patch container holds anything (nested dicts/lists of patches count by their leaves)."""
    if isinstance(value, dict):
        return any(_nonempty(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return len(value) > 0
    return value is not None


def refusals(patcher: Any) -> list[str]:
    """Why this MODEL cannot run on our engine as ComfyUI would run it; empty when it can."""
    reasons: list[str] = []
    model = getattr(patcher, "model", None)
    kind = type(model).__name__
    if kind not in WAN_MODEL_CLASSES or not hasattr(model, "diffusion_model"):
        return [
            f"the MODEL is a {kind}, not a Wan 2.1 text-to-video model (expected {sorted(WAN_MODEL_CLASSES)}); "
            "load a causal Wan 2.1 checkpoint (Self-Forcing, CausVid, LongLive) with Load Diffusion Model"
        ]
    options = dict(getattr(patcher, "model_options", {}) or {})
    transformer_options = dict(options.pop("transformer_options", {}) or {})
    for key, value in transformer_options.items():
        if not _nonempty(value):
            continue
        if key in ("patches", "patches_replace"):
            names = sorted(value) if isinstance(value, dict) else value
            reasons.append(f"model patches that change the forward ({key}: {names})")
        elif key == "ar_config":
            reasons.append(
                "ARVideoI2V's start image (transformer_options.ar_config); connect the image to Inferix Block "
                "Denoise's start_frames instead"
            )
        else:
            reasons.append(f"transformer option '{key}'")
    for key, value in options.items():
        if key not in _HARMLESS_OPTIONS and _nonempty(value):
            reasons.append(f"model option '{key}' (a sampler or model function wrapper)")
    for key in getattr(patcher, "object_patches", {}) or {}:
        if key != "model_sampling":
            reasons.append(f"an object patch on '{key}'")
    for attr, what in (
        ("weight_wrapper_patches", "weight wrappers"),
        ("wrappers", "wrappers"),
        ("hook_patches", "hook (scheduled) weight patches"),
        ("injections", "injections"),
    ):
        if _nonempty(getattr(patcher, attr, None)):
            reasons.append(what)
    return reasons


def check_honourable(patcher: Any) -> None:
    """Raise ConfigError naming everything this MODEL carries that Inferix cannot honour."""
    reasons = refusals(patcher)
    if reasons:
        raise ConfigError(
            "this MODEL cannot run on the Inferix engine as ComfyUI would run it: it carries "
            + "; ".join(reasons)
            + ". Remove those nodes between the model loader and this node (weight patches such as "
            "LoRA loaders are fine)."
        )


def flow_shift(patcher: Any) -> float | None:
    """The shift of a `model_sampling` object patch (ModelSamplingSD3 and kin), if there is one."""
    sampling = (getattr(patcher, "object_patches", {}) or {}).get("model_sampling")
    shift = getattr(sampling, "shift", None)
    if sampling is not None and shift is None:
        raise ConfigError(
            f"the MODEL's model_sampling patch ({type(sampling).__name__}) has no flow shift; Inferix samples "
            "with a flow-matching shift only: remove that node or use ModelSamplingSD3"
        )
    return None if shift is None else float(shift)


def patched_weights(patcher: Any, dtype: Any) -> dict[str, Any]:
    """The diffusion model's weights with every weight patch applied, as ComfyUI would apply them, in `dtype`.

    Per key: the unpatched weight (its backup if the patcher is loaded and patched in place), cast to
    float32 and put through the weight's own convert_func (fp8 scales), then `comfy.lora.calculate_weight`
    over the patches (LoRA, LoHa, diff, set, ...). Nothing of the patcher changes; the copies are ours.
    """
    import torch

    try:
        import comfy.lora as comfy_lora
    except ImportError as exc:  # only a real ComfyUI produces a MODEL
        raise ConfigError("a core MODEL can only be converted inside ComfyUI") from exc
    out: dict[str, Any] = {}
    patched = 0
    for key, (base, *patches) in patcher.get_key_patches(PREFIX).items():
        if _SIDE_KEYS.search(key):
            continue  # already folded into the weight by its convert_func
        weight, convert = base
        w = weight.to(device="cpu", dtype=torch.float32, copy=True)
        w = convert(w, inplace=True)
        if patches:
            w = comfy_lora.calculate_weight(patches, w, key)
            patched += 1
        out[key] = w.to(dtype)
    log.info("took %d diffusion-model tensors from the core MODEL, %d of them patched", len(out), patched)
    return out


def world_model_from_core(
    patcher: Any,
    family: str,
    core_vae: Any,  # a core VAE, or the path of a VAE file
    text_encoder_path: str | None = None,
    dtype: str = "auto",
    attention: str = "auto",
    fp8: bool = False,
    compile: bool = False,
) -> Any:
    """Our WorldModel with the core MODEL's patched weights and the core VAE's (both copied)."""
    from inferix_core.models.registry import resolve_dtype
    from inferix_core.models.state_dict import world_model_from_state_dict

    check_honourable(patcher)
    shift = flow_shift(patcher)
    device = rt.torch_device()
    dt = resolve_dtype(dtype, device)
    inner = patcher.model.diffusion_model
    rt.make_room(rt.estimate_weights_bytes(patcher, dt), device)
    weights = patched_weights(patcher, dt)
    model = world_model_from_state_dict(
        weights,
        family=family,
        source=f"core MODEL ({type(patcher.model).__name__})",
        num_heads=getattr(inner, "num_heads", None),
        text_len=int(getattr(inner, "text_len", 512)),
        vae=_vae(core_vae, device, dt),
        text_encoder_path=text_encoder_path,
        dtype=dt,
        device=device,
        attention=attention,
        fp8=fp8,
        compile=compile,
    )
    del weights
    if shift is not None and shift != model.sampling.shift:
        log.info(
            "using the MODEL's model_sampling shift %.3g instead of the family's %.3g", shift, model.sampling.shift
        )
        model = dataclasses.replace(model, sampling=dataclasses.replace(model.sampling, shift=shift))
    return rt.register_world_model(model)


def _vae(vae: Any, device: Any, dtype: Any) -> Any:
    """Our streaming Wan VAE from a file path (as Inferix Load World Model loads it) or a core VAE's weights."""
    if isinstance(vae, str):
        from inferix_core.models.registry import load_vae

        return load_vae(vae, device, dtype)
    return wan_vae_from_core(vae, device=device)


def _text_encoders() -> list[str]:
    return [NONE, *rt.model_choices("text_encoders")]


class InferixWorldModelFromCoreModel(io.ComfyNode):
    """Builds an Inferix world model from a core MODEL (causal Wan 2.1, LoRAs applied) and a core VAE."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixWorldModelFromCoreModel",
            display_name="Inferix World Model from ComfyUI MODEL",
            category=f"{types.CATEGORY}/loaders",
            description="Runs a core MODEL (Load Diffusion Model with a causal Wan 2.1 checkpoint, after any LoRA "
            "loaders) on the Inferix engine: its patched weights are copied into our block-causal "
            "transformer, so KV-cache kinds, streaming and live previews apply. Refuses a MODEL with patches "
            "that change the forward.",
            inputs=[
                io.Model.Input("model", tooltip="A core Wan 2.1 MODEL whose weights are a causal checkpoint."),
                io.Combo.Input(
                    "vae_name",
                    options=[NONE, *rt.model_choices("vae")],
                    default=NONE,
                    tooltip="A Wan 2.1 VAE file from models/vae; or 'none' and connect a core VAE below.",
                ),
                io.Combo.Input(
                    "family",
                    options=_families(),
                    default="self_forcing",
                    tooltip="How the weights were trained to sample (steps, shift, window); weights cannot tell.",
                ),
                io.Combo.Input(
                    "text_encoder",
                    options=_text_encoders(),
                    default=NONE,
                    tooltip="UMT5-XXL from models/text_encoders for Block Denoise's prompt text; 'none' = "
                    "connect a core CONDITIONING (CLIP Text Encode) to Block Denoise instead.",
                ),
                io.Combo.Input(
                    "dtype",
                    options=DTYPES,
                    default="auto",
                    tooltip="Compute precision of the copy: 'auto' = bf16 on GPUs, else fp32.",
                ),
                io.Combo.Input(
                    "attention",
                    options=attention_backends(),
                    default="auto",
                    tooltip="Attention kernel; 'auto' = FlashAttention-4 where installed, else sdpa.",
                ),
                io.Vae.Input(
                    "vae",
                    optional=True,
                    tooltip="A core Wan 2.1 VAE (Load VAE), copied into the streaming decoder; used when "
                    "vae_name is 'none'.",
                ),
                io.Boolean.Input("fp8", default=False, optional=True, tooltip="FP8 block linears (as the loader's)."),
                io.Boolean.Input(
                    "compile", default=False, optional=True, tooltip="torch.compile each block (as the loader's)."
                ),
            ],
            outputs=[types.WorldModel.Output("world_model", tooltip="For Inferix Block Denoise and VAE Decode.")],
        )

    @classmethod
    def execute(
        cls,
        model: Any,
        vae_name: str,
        family: str,
        text_encoder: str,
        dtype: str,
        attention: str,
        vae: Any = None,
        fp8: bool = False,
        compile: bool = False,
    ) -> io.NodeOutput:
        if vae_name != NONE:
            vae = rt.resolve_model_file("vae", vae_name)
        elif vae is None:
            raise ConfigError("connect a core VAE (Load VAE, Wan 2.1) or choose a vae_name from models/vae")
        path = None if text_encoder == NONE else rt.resolve_model_file("text_encoders", text_encoder)
        world_model = world_model_from_core(model, family, vae, path, dtype, attention, bool(fp8), bool(compile))
        summary = world_model.describe()
        log.info("world model from a core MODEL: %s", summary.replace("\n", "; "))
        return io.NodeOutput(world_model, ui={"text": [summary]})
