"""InferixLoadWorldModel: pick weight files from ComfyUI's model folders and load one world model.

The node resolves file names to paths and calls `inferix_core.models.registry.load_world_model`;
detecting the checkpoint layout, the family and its config is the registry's business, not ours.
"""

from __future__ import annotations

import logging

from inferix_core.attention.registry import attention_backends
from inferix_core.errors import ConfigError, MissingFileError
from inferix_core.models.registry import FAMILIES, WEIGHTS_CHOICES
from inferix_core.workflow.settings import MODEL_FOLDERS, NONE, load_options, model_file

from . import comfy_runtime as rt
from . import types
from .compat import io

log = logging.getLogger(__name__)

DTYPES = ["auto", "fp32", "bf16", "fp16"]
DEVICES = ["auto", "cpu", "cuda"]
FAMILY_CHOICES = ["auto"] + [name for name in FAMILIES if name != "bundled"]
# input name -> (ComfyUI model folder, first choices)
FIRST_CHOICES = {"model": [rt.BUNDLED], "vae": [rt.BUNDLED], "preview_decoder": [NONE], "text_encoder": [rt.BUNDLED]}
FILE_INPUTS = {name: (MODEL_FOLDERS[name], first) for name, first in FIRST_CHOICES.items()}


def _choices(name: str) -> list[str]:
    folder, first = FILE_INPUTS[name]
    return first + [f for f in rt.model_choices(folder) if f not in first]


def _resolve(name: str, value: str) -> str | None:
    """Full path of a chosen file. 'none', and 'bundled' for the parts beside the model, become None
    (the registry then uses the family's default); a bundled model stays 'bundled'."""
    return model_file(name, value, rt.resolve_model_file)


def missing_files(**chosen: str | None) -> str | None:
    """One message naming every chosen file that is not in its model folder (or is outside it), or None."""
    missing = []
    for name, value in chosen.items():
        if value is None or value in (rt.BUNDLED, NONE):
            continue
        try:
            _resolve(name, value)
        except MissingFileError:
            missing.append(f"{name} '{value}' (models/{FILE_INPUTS[name][0]}/)")
    if not missing:
        return None
    where = "ComfyUI's model folders" if rt.folder_paths is not None else "the model folders ($INFERIX_MODELS_DIR)"
    return (
        f"{len(missing)} model file(s) not found in {where}: {', '.join(missing)}. Only files inside those folders "
        "load: put each there and pick it from its list, "
        f"or choose '{rt.BUNDLED}' for the small bundled model"
    )


class InferixLoadWorldModel(io.ComfyNode):
    """Loads a causal (block-diffusion) world model: transformer, VAE, optional preview decoder, text encoder."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixLoadWorldModel",
            display_name="Inferix Load World Model",
            category=f"{types.CATEGORY}/loaders",
            description="Loads a block-diffusion world model (Self-Forcing, CausVid, LongLive, Causal-Forcing, Krea "
            "Realtime 14B causal Wan 2.1, or the small bundled model). The config is read from the weights; the "
            "family from the file's content (or the family input), with the reason shown.",
            inputs=[
                io.Combo.Input(
                    "model",
                    options=_choices("model"),
                    default=rt.BUNDLED,
                    tooltip="Causal transformer weights from models/diffusion_models "
                    "(ComfyUI, Wan, diffusers or Self-Forcing .pt layout), or the bundled "
                    "small model that runs on CPU.",
                ),
                io.Combo.Input(
                    "vae",
                    options=_choices("vae"),
                    default=rt.BUNDLED,
                    tooltip="Wan 2.1 VAE from models/vae ('bundled' = the one matching the bundled "
                    "model). Decodes latents to frames block by block.",
                ),
                io.Combo.Input(
                    "preview_decoder",
                    options=_choices("preview_decoder"),
                    default=NONE,
                    tooltip="Optional tiny decoder (TAEHV) from models/vae_approx for fast live "
                    "previews; 'none' previews with the full VAE.",
                ),
                io.Combo.Input(
                    "text_encoder",
                    options=_choices("text_encoder"),
                    default=rt.BUNDLED,
                    tooltip="UMT5-XXL text encoder from models/text_encoders; 'bundled' uses the "
                    "family's default (a small built-in encoder for the bundled model).",
                ),
                io.Combo.Input(
                    "dtype",
                    options=DTYPES,
                    default="auto",
                    tooltip="Compute precision: 'auto' = bf16 on GPUs that support it, else fp32. "
                    "fp32 is exact and slowest.",
                ),
                io.Combo.Input(
                    "attention",
                    options=attention_backends(),
                    default="auto",
                    tooltip="Attention kernel. 'auto' = FlashAttention-4 where the fa4 extra is installed "
                    "on a Hopper/Blackwell GPU (per shape, where measured faster), else 'sdpa' (PyTorch, works "
                    "everywhere); the others fall back to sdpa, with a log line, when not installed.",
                ),
                io.Combo.Input(
                    "device",
                    options=DEVICES,
                    default="auto",
                    tooltip="Where the model runs: 'auto' = CUDA when available, else CPU.",
                ),
                # Optional and last: a workflow saved before these existed (its API inputs without them, its
                # UI widgets_values one position short per missing input) still loads, with the defaults.
                io.Boolean.Input(
                    "fp8",
                    default=False,
                    optional=True,
                    tooltip="Run the transformer blocks' linear layers as FP8 GEMMs (e4m3, per-channel "
                    "scales). Faster on GPUs with compute capability ≥ 8.9 (Ada/Hopper), half "
                    "the block weights' memory, small quality cost (see docs/performance.md). "
                    "Emulated (slow) elsewhere.",
                ),
                io.Boolean.Input(
                    "compile",
                    default=False,
                    optional=True,
                    tooltip="torch.compile each transformer block: fuses the elementwise work (~1.3× "
                    "faster diffusion on an H200). The first block of the first run compiles "
                    "first (a one-off wait); later runs reuse it.",
                ),
                io.Combo.Input(
                    "family",
                    options=FAMILY_CHOICES,
                    default="auto",
                    optional=True,
                    tooltip="Which model family's sampling settings to use. 'auto' reads it from the file "
                    "(14B dims, metadata, a config or LoRA beside it, training-checkpoint keys, then the "
                    "name) and says why in the node's text; set it when the text says there was no evidence.",
                ),
                io.Combo.Input(
                    "weights",
                    options=list(WEIGHTS_CHOICES),
                    default="auto",
                    optional=True,
                    tooltip="For training checkpoints holding both: 'ema' = generator_ema, 'generator' = the raw "
                    "generator. 'auto' takes what the family's authors run (LongLive, CausVid: generator; "
                    "Self-Forcing, Causal-Forcing frame-wise: generator_ema).",
                ),
                types.MemorySettings.Input(
                    "memory",
                    optional=True,
                    tooltip="From Inferix Memory Settings: block swap, fp8 weights and text-encoder placement "
                    "for GPUs smaller than the model. Unconnected: everything on the GPU.",
                ),
                io.Boolean.Input(
                    "cuda_graphs",
                    default=False,
                    optional=True,
                    tooltip="Capture each transformer call (all blocks of one step) as a CUDA graph and replay it: "
                    "no per-kernel launch cost on the CPU. Off until measured (docs/performance.md). Runs eagerly, "
                    "with a log line, on the CPU, with block swap or an offloaded/paged/quantized KV cache. The KV "
                    "cache and the graphs stay allocated between runs.",
                ),
            ],
            outputs=[
                types.WorldModel.Output(
                    "world_model", tooltip="The loaded world model, for Inferix Block Denoise and Inferix VAE Decode."
                )
            ],
        )

    @classmethod
    def validate_inputs(
        cls,
        model: str | None = None,
        vae: str | None = None,
        preview_decoder: str | None = None,
        text_encoder: str | None = None,
    ) -> bool | str:
        """The file inputs are named here so that ComfyUI does not check them against its list one by one.

        ComfyUI pins a validator's message on every input it names, and a template missing three files
        should get one message naming the three: `missing_files` gives it when the node runs, before any
        file is opened (a name outside the model folders is refused there, never read).
        """
        return True

    @classmethod
    def execute(
        cls,
        model: str,
        vae: str,
        preview_decoder: str,
        text_encoder: str,
        dtype: str,
        attention: str,
        device: str,
        fp8: bool = False,
        compile: bool = False,
        family: str = "auto",
        weights: str = "auto",
        memory=None,
        cuda_graphs: bool = False,
    ) -> io.NodeOutput:
        # fp8/compile default here too: ComfyUI passes no value for an optional input a workflow lacks.
        # No model cache of our own: ComfyUI re-runs this node whenever any input (these two included) changes.
        from inferix_core.models.registry import load_world_model

        problem = missing_files(model=model, vae=vae, preview_decoder=preview_decoder, text_encoder=text_encoder)
        if problem:
            raise MissingFileError(problem)
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device is 'cuda' but no CUDA GPU is available; choose 'auto' or 'cpu'")
        device = rt.device_choice(device)  # 'auto' is ComfyUI's device (--cpu, --cuda-device, mps) inside ComfyUI
        rt.make_room(rt.estimate_file_bytes(_resolve("model", model), _resolve("text_encoder", text_encoder)), device)
        widgets = {"vae": vae, "preview_decoder": preview_decoder, "text_encoder": text_encoder, "dtype": dtype,
                   "attention": attention, "device": device, "fp8": fp8, "compile": compile, "family": family,
                   "weights": weights, "cuda_graphs": cuda_graphs}  # fmt: skip
        options = load_options(widgets, resolve=rt.resolve_model_file, memory=memory)
        world_model = load_world_model(_resolve("model", model), options)
        world_model = rt.register_world_model(world_model)  # ComfyUI can now evict it and load it back
        summary = world_model.describe()
        log.info("loaded world model: %s", summary.replace("\n", "; "))
        return io.NodeOutput(world_model, ui={"text": [summary]})
