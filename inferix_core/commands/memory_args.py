"""The model-loading flags shared by the commands that load a model (`play`, `info`): one spelling everywhere.

The flags become the loader's widget values and go through `workflow.settings`, the nodes' own path, so equal
settings give an equal LoadOptions from a flag or a node.
"""

from __future__ import annotations

import argparse

from ..models.memory import TEXT_ENCODER_PLACEMENTS, MemorySettings, parse_memory_size
from ..models.options import LoadOptions
from ..workflow.settings import LOADER_DEFAULTS, load_options, memory_settings


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory (GPUs smaller than the model)")
    g.add_argument(
        "--gpu-memory",
        metavar="SIZE",
        help="GPU memory the model may use, e.g. 24GB: transformer blocks that do not fit after the KV cache, "
        "VAE and text encoder stream from host memory (block swap)",
    )
    g.add_argument(
        "--resident-blocks", type=int, metavar="N", help="keep N transformer blocks on the GPU, stream the rest"
    )
    g.add_argument(
        "--fp8-weights",
        action="store_true",
        help="keep the block linears' weights in fp8 e4m3 (an fp8-scaled file keeps its own values)",
    )
    g.add_argument(
        "--text-encoder-placement",
        choices=TEXT_ENCODER_PLACEMENTS,
        default="device",
        help="umT5 on the GPU (device), on the CPU, or on the GPU only while encoding (offload)",
    )


def memory_settings_from_args(args: argparse.Namespace) -> MemorySettings:
    size = getattr(args, "gpu_memory", None)
    resident = getattr(args, "resident_blocks", None)
    return memory_settings(
        {
            "gpu_memory_gb": parse_memory_size(size) if size else 0.0,
            "resident_blocks": -1 if resident is None else resident,
            "fp8_weights": bool(getattr(args, "fp8_weights", False)),
            "text_encoder": getattr(args, "text_encoder_placement", "device"),
        }
    )


def add_family_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--family",
        default="auto",
        help="model family of a checkpoint; auto (default) reads it from the file's content, then its name, and "
        "prints why (`inferix info` lists the families)",
    )
    p.add_argument(
        "--weights",
        default="auto",
        choices=["auto", "ema", "generator"],
        help="training checkpoints: generator_ema, generator, or auto (what the family's authors run)",
    )


def loader_widgets_from_args(args: argparse.Namespace) -> dict:
    """Load World Model's widget values from the flags a command has (`play`, `info`); the others keep the node's
    defaults. File flags are paths."""
    names = ("vae", "text_encoder", *LOADER_DEFAULTS)
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def load_options_from_args(args: argparse.Namespace) -> LoadOptions:
    """`load_world_model`'s options from the flags `play` and `info` share: files, speed, family, weights, LoRAs,
    memory levers, as the loader node builds them from its widgets."""
    return load_options(
        loader_widgets_from_args(args), memory=memory_settings_from_args(args), lora=getattr(args, "lora", ())
    )
