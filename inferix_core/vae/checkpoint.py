"""Wan VAE weight layouts → canonical (original Wan 2.1) key names.

Layouts are recognised by probe keys, the way diffusers' single_file_utils does, and converted by one
function each. Recognised: original Wan / ComfyUI (`decoder.conv1.weight`, optionally under a prefix
such as `first_stage_model.`, `vae.` or our fixtures' `weights.`), and diffusers `AutoencoderKLWan`.
This module reads files and renames keys; it knows nothing about the architecture beyond names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from ..errors import CheckpointLayoutError
from ..tensors import read_state_dict  # re-exported: taehv and older callers import it from here

WAN_PROBE = "decoder.conv1.weight"
DIFFUSERS_PROBE = "decoder.conv_in.weight"


def _find_prefix(keys: list[str], probe: str) -> str | None:
    hits = sorted(k[: -len(probe)] for k in keys if k.endswith(probe) and (k == probe or k[-len(probe) - 1] == "."))
    return hits[0] if hits else None


def _strip(sd: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}


_DIFFUSERS_RESNET = {
    "norm1": "residual.0",
    "conv1": "residual.2",
    "norm2": "residual.3",
    "conv2": "residual.6",
    "conv_shortcut": "shortcut",
}
_DIFFUSERS_FIXED = {
    "quant_conv": "conv1",
    "post_quant_conv": "conv2",
    "encoder.conv_in": "encoder.conv1",
    "decoder.conv_in": "decoder.conv1",
    "encoder.norm_out": "encoder.head.0",
    "encoder.conv_out": "encoder.head.2",
    "decoder.norm_out": "decoder.head.0",
    "decoder.conv_out": "decoder.head.2",
}


def convert_diffusers(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """diffusers `AutoencoderKLWan` (Wan 2.1 config) → original keys.

    The encoder's `down_blocks` is already the flat `downsamples` list; the decoder's
    `up_blocks.{b}.resnets.{r}` / `.upsamplers.0` flatten to `upsamples.{b·(R+1) + r}` with R resnets per
    block. Attention inside up blocks (not used by Wan 2.1) is not mapped and is reported as unknown.
    """
    num_resnets = 1 + max(
        (int(m.group(1)) for k in sd if (m := re.match(r"decoder\.up_blocks\.\d+\.resnets\.(\d+)\.", k))), default=-1
    )
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        new = key
        for old, canon in _DIFFUSERS_FIXED.items():
            if key.startswith(old + "."):
                new = canon + key[len(old) :]
                break
        else:
            if m := re.match(r"(encoder|decoder)\.mid_block\.resnets\.(\d)\.(\w+)\.(.+)$", key):
                new = f"{m[1]}.middle.{2 * int(m[2])}.{_DIFFUSERS_RESNET[m[3]]}.{m[4]}"
            elif m := re.match(r"(encoder|decoder)\.mid_block\.attentions\.0\.(.+)$", key):
                new = f"{m[1]}.middle.1.{m[2]}"
            elif m := re.match(r"encoder\.down_blocks\.(\d+)\.(\w+)\.(.+)$", key):
                new = f"encoder.downsamples.{m[1]}.{_DIFFUSERS_RESNET.get(m[2], m[2])}.{m[3]}"
            elif m := re.match(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(\w+)\.(.+)$", key):
                idx = int(m[1]) * (num_resnets + 1) + int(m[2])
                new = f"decoder.upsamples.{idx}.{_DIFFUSERS_RESNET[m[3]]}.{m[4]}"
            elif m := re.match(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)$", key):
                new = f"decoder.upsamples.{int(m[1]) * (num_resnets + 1) + num_resnets}.{m[2]}"
        out[new] = value
    return out


def to_canonical(sd: Mapping[str, Tensor], source: str = "state dict") -> tuple[dict[str, Tensor], str]:
    """Detect the layout and return (canonical state dict, layout name)."""
    keys = list(sd)
    prefix = _find_prefix(keys, WAN_PROBE)
    if prefix is not None:
        return _strip(sd, prefix), f"wan (prefix '{prefix}')" if prefix else "wan"
    prefix = _find_prefix(keys, DIFFUSERS_PROBE)
    if prefix is not None and f"{prefix}post_quant_conv.weight" in sd:
        return convert_diffusers(_strip(sd, prefix)), "diffusers"
    sample = ", ".join(keys[:6]) + (" ..." if len(keys) > 6 else "")
    raise CheckpointLayoutError(
        f"'{source}' is not a Wan 2.1 VAE we recognise: found {len(keys)} keys ({sample}) but no "
        f"'{WAN_PROBE}' (original Wan / ComfyUI layout, optionally under a prefix such as "
        f"'first_stage_model.' or 'vae.') and no '{DIFFUSERS_PROBE}' with 'post_quant_conv.weight' "
        f"(diffusers AutoencoderKLWan). Pass the Wan 2.1 VAE file (e.g. ComfyUI models/vae/wan_2.1_vae.safetensors)."
    )


def load_vae_state_dict(path: str | Path) -> tuple[dict[str, Tensor], str]:
    """Read a VAE file and convert it to canonical keys; returns (state dict, layout name)."""
    sd = read_state_dict(path, expected="Wan 2.1 VAE")
    return to_canonical(sd, source=Path(path).name)
