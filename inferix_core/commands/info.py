"""`inferix info [MODEL]`: what this installation can run, and what a model file is.

Prints the torch/CUDA setup, the model families (with their sampling and cache defaults) and the
attention backends with their availability; with MODEL, loads it and prints `WorldModel.describe()`.
It changes nothing and downloads nothing.
"""

from __future__ import annotations

import argparse
import platform
from importlib import metadata
from typing import Any

import torch

from ..attention.registry import AUTO, BACKENDS, attention_backends, resolve_auto
from ..models.registry import FAMILIES, load_world_model
from .lora_option import add_lora_option
from .memory_args import add_family_arguments, add_memory_arguments, load_options_from_args


def register(subparsers: Any) -> None:
    """Add the `info` subcommand."""
    p = subparsers.add_parser(
        "info",
        help="show families, attention backends, torch/CUDA, and a model's description",
        description="Without MODEL: the environment. With MODEL ('bundled' or a checkpoint "
        "path): also load it and describe it.",
    )
    p.add_argument("model", nargs="?", default=None, help="'bundled' or a transformer checkpoint")
    add_family_arguments(p)
    p.add_argument("--vae", default=None, help="VAE file to load beside the checkpoint")
    p.add_argument("--text-encoder", default=None, help="umT5 file to load beside the checkpoint")
    p.add_argument("--device", default="cpu", help="where to load the model (cpu by default: info only reads)")
    p.add_argument("--dtype", default="auto", help="auto, fp32, bf16 or fp16")
    p.add_argument(
        "--fp8",
        action="store_true",
        help="load with the transformer-block linears in fp8 e4m3 (the description then counts them)",
    )
    add_memory_arguments(p)
    add_lora_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(environment_text())
    if args.model is not None:
        world_model = load_world_model(args.model, load_options_from_args(args))
        print("\nmodel:")
        print(_indent(world_model.describe()))
    return 0


def environment_text() -> str:
    """The installation's facts as printed by `inferix info` (also handy in bug reports)."""
    try:
        version = metadata.version("comfyui-inferix")
    except metadata.PackageNotFoundError:
        version = "(not installed as a package)"
    lines = [f"inferix {version}, python {platform.python_version()}, torch {torch.__version__}"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            lines.append(
                f"cuda:{i} {props.name}, {props.total_memory / 2**30:.1f} GiB, "
                f"compute {props.major}.{props.minor} (CUDA {torch.version.cuda})"
            )
    else:
        lines.append("CUDA: not available (CPU only)")
    lines.append("\nfamilies:")
    for fam in FAMILIES.values():
        s, c = fam.sampling, fam.cache
        lines.append(f"  {fam.name:<13} {fam.description}")
        lines.append(
            f"  {'':<13} steps {list(s.denoising_steps)}, {s.block_frames} frames/block, shift {s.shift}, "
            f"window {c.window_frames}, sink {c.sink_frames}, {fam.fps} fps"
        )
    lines.append("\nattention backends:")
    for name in attention_backends():
        if name == AUTO:
            lines.append(f"  {name:<13} {'the default':<14} here: {resolve_auto().name} (flash_attn_4 where the fa4 "
                         "extra imports on an sm_90+ GPU, else sdpa)")  # fmt: skip
            continue
        backend = BACKENDS[name]
        state = "available" if backend.is_available() else "not available"
        lines.append(f"  {name:<13} {state:<14} {backend.description}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
