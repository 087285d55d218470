"""`--lora FILE[:STRENGTH]` (repeatable) for the subcommands that load a model (`info`, `play`)."""

from __future__ import annotations

import argparse

from ..models.lora import parse_lora_arg


def add_lora_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lora",
        action="append",
        type=parse_lora_arg,
        default=[],
        metavar="FILE[:STRENGTH]",
        help="merge a LoRA into the transformer weights at load (strength 1 unless given, e.g. lora.pt:0.8); "
        "repeat to stack several. peft (LongLive lora.pt), ComfyUI, kohya and diffusers Wan LoRAs",
    )
