"""The model-loading flags shared by the commands that load a model (`play`, `info`): one spelling everywhere."""

from __future__ import annotations

import argparse

from ..models.memory import TEXT_ENCODER_PLACEMENTS, MemorySettings, parse_memory_size


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
    return MemorySettings(
        gpu_memory_gb=parse_memory_size(size) if size else None,
        resident_blocks=getattr(args, "resident_blocks", None),
        fp8_weights=bool(getattr(args, "fp8_weights", False)),
        text_encoder_placement=getattr(args, "text_encoder_placement", "device"),
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


def model_flag_kwargs(args: argparse.Namespace) -> dict:
    """`load_world_model` arguments from the flags `play` and `info` share: family, weights, LoRAs, memory levers."""
    return {
        "family": args.family,
        "weights": args.weights,
        "lora": args.lora,
        **memory_settings_from_args(args).load_kwargs(),
    }
