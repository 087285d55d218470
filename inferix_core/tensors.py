"""Tensor utilities below every network: host → device copies without a sync, and reading a weights file.

The lowest layer after errors.py (docs/architecture.md, "Layers"): models, VAEs, text encoders and the
pipeline all use these, so they live here rather than in any one of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from .errors import CheckpointLayoutError, MissingFileError

_WRAPPERS = ("state_dict", "model", "module", "vae", "model_state_dict")
_ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

log = logging.getLogger(__name__)


def prefer_expandable_segments(device: torch.device | str) -> bool:
    """Switch CUDA's caching allocator to expandable segments for a run planned against a memory budget.

    Why: a plan that fills a small card (block swap, a sliced VAE decode) fails on fragmentation, not on
    its totals: on the H200 under an 8 GiB cap the 1.3B + Wan VAE run asked 92 MiB with 6.85 GiB
    allocated and 0.36 GiB reserved but unallocated (docs/performance.md). Expandable segments map pages
    into one growing segment per stream, so freed space serves later requests. The numbers computed are
    the same; only where the allocator puts them changes. A configuration the user (or ComfyUI, which
    may choose `backend:cudaMallocAsync`) already set is kept. Returns whether it switched; logs either way.
    """
    if torch.device(device).type != "cuda":
        return False
    own = {name: os.environ[name] for name in _ALLOC_CONF_VARS if os.environ.get(name)}
    if own:
        log.info("memory budget: keeping the allocator configuration already set (%s)", own)
        return False
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # before CUDA starts; child processes
    if torch.cuda.is_initialized():  # already started: the setting applies to the segments made from now on
        setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
        (setter or torch.cuda.memory._set_allocator_settings)("expandable_segments:True")
    log.info(
        "memory budget: CUDA's allocator uses expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
        "True) so a tight plan is not lost to fragmentation; set PYTORCH_CUDA_ALLOC_CONF to choose otherwise"
    )
    return True


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


MISNAMED = (
    "'{name}' is named .safetensors but holds a torch/pickle checkpoint; expected a {expected} in safetensors "
    "format. Convert it, or rename it to .pth (tensors are then loaded with weights_only, never running code)"
)


def read_state_dict(path: str | Path, expected: str = "weights file") -> dict[str, Tensor]:
    """Tensors of a safetensors or torch .pth/.pt/.ckpt file (weights_only), unwrapping one level of nesting.

    The format is taken from the content, not the extension (a pickle renamed `.safetensors` is still a
    pickle). Anything unreadable — pickled objects, truncated or random bytes — is a one-line
    CheckpointLayoutError naming the file and `expected` (e.g. "Wan 2.1 VAE"); file bytes are never quoted.
    """
    import pickle

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"weights file '{path}' does not exist")
    with path.open("rb") as f:
        head = f.read(9)
    what = f"'{path.name}' is not a readable {expected}"
    if len(head) < 9:
        raise CheckpointLayoutError(f"{what}: it is {len(head)} bytes long (empty or truncated)")
    if head[8:9] == b"{":  # safetensors: u64 header length, then the JSON header
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as exc:  # SafetensorError (not exported), OSError
            raise CheckpointLayoutError(
                f"{what}: the safetensors data is damaged ({str(exc).splitlines()[0][:120]}); it is probably "
                "truncated (compare its size with the download)"
            ) from None
    if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80":  # neither torch zip nor a pickle
        raise CheckpointLayoutError(
            f"{what}: it is neither safetensors nor a torch checkpoint (corrupt, or another format); expected a "
            f"{expected} as .safetensors or a torch state dict"
        )
    if path.suffix == ".safetensors":
        raise CheckpointLayoutError(MISNAMED.format(name=path.name, expected=expected))
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointLayoutError(
            f"{what}: it holds pickled Python objects that would have to be executed to load it; we only load "
            f"tensors. Re-save the {expected} as a state dict of tensors, or as .safetensors"
        ) from None
    except Exception as exc:  # torch raises many types for damaged archives
        raise CheckpointLayoutError(
            f"{what}: the torch checkpoint is damaged ({type(exc).__name__}); it is probably truncated "
            "(compare its size with the download)"
        ) from None
    for _ in range(2):  # {"state_dict": {...}} or {"model": {"state_dict": ...}}
        if isinstance(obj, Mapping) and not any(isinstance(v, Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _WRAPPERS if isinstance(obj.get(k), Mapping)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, Mapping):
        raise CheckpointLayoutError(f"'{path.name}' holds a {type(obj).__name__}, expected a {expected} state dict")
    return {k: v for k, v in obj.items() if isinstance(v, Tensor)}
