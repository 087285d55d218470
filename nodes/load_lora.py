"""InferixLoadWorldModelLoRA: a LoRA file from models/loras merged into a loaded world model.

Chainable like core ComfyUI's LoraLoaderModelOnly (MODEL in, MODEL out): world model in, a new world
model out, so several LoRA nodes stack in a row. The input model is never changed (ComfyUI caches node
outputs and may hand the same model to other branches); the output shares every tensor the LoRA does
not touch. Reading the formats and merging is `inferix_core.models.lora`'s job.
"""

from __future__ import annotations

import logging

from . import comfy_runtime as rt
from . import types
from .compat import io

log = logging.getLogger(__name__)

LORA_FOLDER = "loras"


class InferixLoadWorldModelLoRA(io.ComfyNode):
    """Merges one LoRA into a world model's transformer weights (peft, ComfyUI/Kijai, kohya, diffusers)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixLoadWorldModelLoRA",
            display_name="Inferix Load World Model LoRA",
            category=f"{types.CATEGORY}/loaders",
            description="Merges a LoRA from models/loras into the world model's transformer weights (no cost per "
            "step). Chain several to stack them. Reads the authors' peft LoRAs (LongLive lora.pt) and ComfyUI, "
            "kohya and diffusers Wan LoRAs.",
            inputs=[
                types.WorldModel.Input(
                    "world_model", tooltip="The model from Inferix Load World Model (or another LoRA node)."
                ),
                io.Combo.Input(
                    "lora_name",
                    options=rt.model_choices(LORA_FOLDER),
                    tooltip="LoRA file from models/loras: LongLive's lora.pt, or a Wan 2.1 LoRA "
                    "(.safetensors) made for the same model size.",
                ),
                io.Float.Input(
                    "strength",
                    default=1.0,
                    min=-10.0,
                    max=10.0,
                    step=0.01,
                    tooltip="How much of the LoRA to add: 1 = as trained, 0 = off, negative = subtract. "
                    "The file's alpha/rank scale is applied on top.",
                ),
            ],
            outputs=[
                types.WorldModel.Output(
                    "world_model_lora",
                    display_name="world_model",
                    tooltip="A new world model with the LoRA merged; the input model is unchanged.",
                )
            ],
        )

    @classmethod
    def validate_inputs(cls, lora_name: str | None = None) -> bool | str:
        if lora_name is None:
            return True
        try:
            rt.resolve_model_file(LORA_FOLDER, lora_name, bundled=False)
        except FileNotFoundError as exc:
            return str(exc)
        return True

    @classmethod
    def execute(cls, world_model, lora_name: str, strength: float) -> io.NodeOutput:
        from inferix_core.models.lora import apply_loras, read_lora

        lora = read_lora(rt.resolve_model_file(LORA_FOLDER, lora_name, bundled=False))
        merged = apply_loras(world_model, [(lora, float(strength))])
        summary = f"{lora.describe()}; strength {float(strength):g}\n{merged.describe()}"
        log.info("LoRA merged: %s", summary.replace("\n", "; "))
        return io.NodeOutput(merged, ui={"text": [summary]})
