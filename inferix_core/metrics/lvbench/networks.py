"""Where the LV-Bench networks live on disk, and how each one is loaded. Nothing is downloaded.

The user puts the files under one weights folder (`inferix lvbench --weights-dir DIR`; the ComfyUI
node passes `models/inferix_metrics/`). `NETWORKS` is the single table of expected names; a missing
file raises `MissingFileError` saying which file, for which metric, and where to put it.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import BackendUnavailableError, CheckpointLayoutError, MissingFileError, ShapeMismatchError
from .base_metrics import FlowEstimator

log = logging.getLogger(__name__)
RAFT_MIN_SIDE = 128  # torchvision RAFT: feature maps (1/8 scale) must be >= 16 for the 4-level pyramid


@dataclass(frozen=True)
class NetworkFile:
    """One network LV-Bench needs: its name under the weights folder and where users get it."""

    title: str
    relpath: str
    is_folder: bool  # a Hugging Face `save_pretrained` folder rather than one file
    used_for: str
    source: str


NETWORKS: dict[str, NetworkFile] = {
    "clip_b32": NetworkFile(
        "CLIP ViT-B/32",
        "clip-vit-base-patch32",
        True,
        "background consistency",
        "the Hugging Face repo openai/clip-vit-base-patch32 (config.json + model.safetensors)",
    ),
    "clip_l14": NetworkFile(
        "CLIP ViT-L/14",
        "clip-vit-large-patch14",
        True,
        "aesthetic quality",
        "the Hugging Face repo openai/clip-vit-large-patch14 (config.json + model.safetensors)",
    ),
    "aesthetic_head": NetworkFile(
        "LAION aesthetic head",
        "sa_0_4_vit_l_14_linear.pth",
        False,
        "aesthetic quality",
        "from github.com/LAION-AI/aesthetic-predictor",
    ),
    "dino_b16": NetworkFile(
        "DINO ViT-B/16",
        "dino-vitb16",
        True,
        "subject consistency",
        "the Hugging Face repo facebook/dino-vitb16 (config.json + model.safetensors)",
    ),
    "musiq_spaq": NetworkFile(
        "MUSIQ (SPAQ)",
        "musiq_spaq_ckpt-358bb6af.pth",
        False,
        "imaging quality / clarity",
        "from the IQA-PyTorch (pyiqa) v0.1-weights release; needs `pip install pyiqa`",
    ),
    "raft_large": NetworkFile(
        "RAFT (torchvision raft_large)",
        "raft_large_C_T_V1-22a6c225.pth",
        False,
        "dynamic degree",
        "torchvision's Raft_Large_Weights.C_T_V1, its port of VBench's raft-things.pth; needs torchvision",
    ),
}


def locate(weights_dir: str | Path | None, key: str) -> Path:
    """Path of network `key` under `weights_dir`, or MissingFileError that says what to put where."""
    spec = NETWORKS[key]
    if weights_dir is None:
        raise MissingFileError(
            f"{spec.title} ({spec.used_for}): no weights folder given. Pass --weights-dir "
            f"(ComfyUI: models/inferix_metrics/) holding '{spec.relpath}' ({spec.source})."
        )
    path = Path(weights_dir) / spec.relpath
    if spec.is_folder:
        has_weights = any((path / n).is_file() for n in ("model.safetensors", "pytorch_model.bin"))
        if not (path / "config.json").is_file() or not has_weights:
            raise MissingFileError(
                f"{spec.title} ({spec.used_for}): '{path}' is missing or has no config.json + "
                f"model.safetensors. Save {spec.source} there."
            )
    elif not path.is_file():
        raise MissingFileError(
            f"{spec.title} ({spec.used_for}): '{path}' not found. Put that file there ({spec.source})."
        )
    return path


def _prepare(model: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    return model.to(device=device, dtype=torch.float32).eval().requires_grad_(False)


def load_clip_vision(path: str | Path, device: str | torch.device = "cpu") -> torch.nn.Module:
    """CLIP image tower with its projection, from a local HF folder (full CLIPModel folders work too)."""
    from transformers import CLIPVisionModelWithProjection

    return _prepare(CLIPVisionModelWithProjection.from_pretrained(str(path), local_files_only=True), device)


def load_dino(path: str | Path, device: str | torch.device = "cpu") -> torch.nn.Module:
    """DINO ViT from a local HF folder; the pooler is dropped because VBench uses the normed CLS token."""
    from transformers import ViTModel

    return _prepare(ViTModel.from_pretrained(str(path), local_files_only=True, add_pooling_layer=False), device)


def load_aesthetic_head(path: str | Path, device: str | torch.device = "cpu") -> torch.nn.Linear:
    """LAION's linear aesthetic head (`weight` [1, D], `bias` [1]); D is read from the file, 768 for ViT-L/14."""
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or set(state) != {"weight", "bias"} or state["weight"].ndim != 2:
        found = sorted(state)[:5] if isinstance(state, dict) else type(state).__name__
        raise CheckpointLayoutError(
            f"'{path}' should hold an nn.Linear(D, 1) state dict with keys weight, bias; found {found}."
        )
    head = torch.nn.Linear(state["weight"].shape[1], state["weight"].shape[0])
    head.load_state_dict(state)
    return _prepare(head, device)


def load_musiq(path: str | Path, device: str | torch.device = "cpu") -> torch.nn.Module:
    """MUSIQ-SPAQ through pyiqa's architecture (VBench `imaging_quality.py` builds it the same way)."""
    if importlib.util.find_spec("pyiqa") is None:
        raise BackendUnavailableError(
            f"MUSIQ weights found at '{path}' but pyiqa is not installed; "
            "`pip install pyiqa` to score imaging quality with them."
        )
    from pyiqa.archs.musiq_arch import MUSIQ

    return _prepare(MUSIQ(pretrained_model_path=str(path)), device)


def load_raft_flow(path: str | Path, device: str | torch.device = "cpu", iters: int = 20) -> FlowEstimator:
    """RAFT-large flow (torchvision's port of VBench's raft-things) as a FlowEstimator on uint8 frames.

    Frames are replicate-padded to a multiple of 8, centred, like RAFT's `InputPadder` ('sintel'
    mode), and the flow is returned at the padded size, which VBench's top-5% statistic also uses.
    RAFT's correlation pyramid needs at least 128 pixels on each padded side; smaller frames raise.
    """
    if importlib.util.find_spec("torchvision") is None:
        raise BackendUnavailableError(
            f"RAFT weights found at '{path}' but torchvision is not installed; dynamic degree falls back to its proxy."
        )
    from torchvision.models.optical_flow import raft_large

    model = raft_large(weights=None)
    model.load_state_dict(torch.load(str(path), map_location="cpu", weights_only=True))
    model = _prepare(model, device)

    @torch.no_grad()
    def flow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.stack([a, b])).permute(0, 3, 1, 2).float().to(device)  # (2, 3, H, W)
        h, w = x.shape[-2:]
        ph, pw = (-h) % 8, (-w) % 8
        if min(h + ph, w + pw) < RAFT_MIN_SIDE:
            raise ShapeMismatchError(
                f"RAFT (dynamic degree) needs frames at least {RAFT_MIN_SIDE} px on each "
                f"side; got {h}x{w}. Score a larger video or use dynamic_proxy."
            )
        x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2], mode="replicate")
        x = 2.0 * (x / 255.0) - 1.0  # RAFT's own input normalisation
        return model(x[:1], x[1:], num_flow_updates=iters)[-1][0].cpu().numpy()  # (2, H', W')

    return flow
