"""Tensor utilities below every network: host → device copies without a sync, and reading a weights file.

The lowest layer after errors.py (docs/architecture.md, "Layers"): models, VAEs, text encoders and the
pipeline all use these, so they live here rather than in any one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from .errors import CheckpointLayoutError, MissingFileError

_WRAPPERS = ("state_dict", "model", "module", "vae", "model_state_dict")


def to_device_async(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Copy a host tensor to `device` without blocking the host (pinned staging on CUDA).

    A plain `.to("cuda")` from pageable memory waits for the copy, i.e. a host sync inside the block
    loop; from pinned memory the copy is queued on the stream and the caching host allocator keeps the
    staging buffer alive until it has run.
    """
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """Tensors of a .safetensors or torch .pth/.pt/.ckpt file (weights_only), unwrapping one level of nesting."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"weights file '{path}' does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    obj = torch.load(str(path), map_location="cpu", weights_only=True)
    for _ in range(2):  # {"state_dict": {...}} or {"model": {"state_dict": ...}}
        if isinstance(obj, Mapping) and not any(isinstance(v, Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _WRAPPERS if isinstance(obj.get(k), Mapping)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, Mapping):
        raise CheckpointLayoutError(f"'{path.name}' holds a {type(obj).__name__}, expected a state dict of tensors")
    return {k: v for k, v in obj.items() if isinstance(v, Tensor)}
