"""InferixMemorySettings: block swap, fp8 weight storage and text-encoder placement for Load World Model.

A small settings node feeding the loader (the pattern of WanVideoWrapper's block-swap node): it only
builds the frozen `MemorySettings`; the planning happens in the loader.
"""

from __future__ import annotations

from inferix_core.models.memory import TEXT_ENCODER_PLACEMENTS, MemorySettings
from inferix_core.workflow.settings import memory_settings

from . import types
from .compat import io


def build_settings(gpu_memory_gb: float, resident_blocks: int, fp8_weights: bool, text_encoder: str) -> MemorySettings:
    """Widget values → MemorySettings (0 GB = no budget; -1 resident blocks = planned from the budget)."""
    return memory_settings(
        {"gpu_memory_gb": gpu_memory_gb, "resident_blocks": resident_blocks, "fp8_weights": fp8_weights,
         "text_encoder": text_encoder}
    )  # fmt: skip


class InferixMemorySettings(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixMemorySettings",
            display_name="Inferix Memory Settings",
            category=f"{types.CATEGORY}/loaders",
            description="Fit big world models on small GPUs: stream transformer blocks from host memory (block "
            "swap), keep weights in fp8, keep the text encoder off the GPU. Feed it to Inferix Load World Model.",
            inputs=[
                io.Float.Input(
                    "gpu_memory_gb",
                    default=0.0,
                    min=0.0,
                    max=1024.0,
                    step=0.5,
                    tooltip="GPU memory this model may use, in GiB. With resident_blocks -1 the loader keeps as "
                    "many transformer blocks on the GPU as fit after the KV cache, VAE and text encoder, and "
                    "streams the rest. 0 = no budget (everything on the GPU).",
                ),
                io.Int.Input(
                    "resident_blocks",
                    default=-1,
                    min=-1,
                    max=200,
                    tooltip="Transformer blocks kept on the GPU; the others stream from pinned host memory one "
                    "block ahead (same results, slower when the copies outrun compute). -1 = planned from "
                    "gpu_memory_gb (all blocks when there is no budget).",
                ),
                io.Boolean.Input(
                    "fp8_weights",
                    default=False,
                    tooltip="Keep the transformer blocks' linear weights in fp8 e4m3 (half of bf16). An "
                    "fp8-scaled file keeps its own values (same results as loading it in bf16); other files "
                    "are quantized at load (small quality cost).",
                ),
                io.Combo.Input(
                    "text_encoder",
                    options=list(TEXT_ENCODER_PLACEMENTS),
                    default="device",
                    tooltip="Where umT5 lives: 'device' (fastest prompt switches, ~11 GB of GPU memory), 'cpu' "
                    "(seconds per new prompt, no GPU memory), 'offload' (moved to the GPU only while it "
                    "encodes a new prompt).",
                ),
            ],
            outputs=[types.MemorySettings.Output("memory", tooltip="For Inferix Load World Model's memory input.")],
        )

    @classmethod
    def execute(cls, gpu_memory_gb: float, resident_blocks: int, fp8_weights: bool, text_encoder: str) -> io.NodeOutput:
        settings = build_settings(gpu_memory_gb, resident_blocks, fp8_weights, text_encoder)
        budget = "none" if settings.gpu_memory_gb is None else f"{settings.gpu_memory_gb:g} GiB"
        resident = "planned" if settings.resident_blocks is None else str(settings.resident_blocks)
        text = f"GPU budget: {budget}\nresident blocks: {resident}\nfp8 weights: {settings.fp8_weights}\n"
        text += f"text encoder: {settings.text_encoder_placement}"
        return io.NodeOutput(settings, ui={"text": [text]})
