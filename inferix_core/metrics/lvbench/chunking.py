"""Frame normalisation and the index arithmetic that cuts a video into VDE chunks.

Chunking is by frame count, as Inferix `LV-Bench/vde.py::evaluate_video` does: F = ⌊T/N⌋ frames per
chunk, the first N·F frames kept and the remainder at the end dropped. Nothing here scores frames.

    T = 23, N = 4  →  F = 5
    frame:  0 1 2 3 4 | 5 6 7 8 9 | 10 .. 14 | 15 .. 19 | 20 21 22
    chunk:      1     |     2     |    3     |    4     |  dropped
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from ...errors import ConfigError, ShapeMismatchError
from .vde import START_END_RATIO

log = logging.getLogger(__name__)


def to_uint8_frames(frames: Any) -> np.ndarray:
    """Return frames as a C-contiguous uint8 numpy array [T, H, W, 3].

    Accepts numpy or torch, uint8 in [0, 255] or float in [0, 1] (ComfyUI IMAGE); floats are clipped
    and rounded, so a float video and its uint8 encoding score the same.
    """
    if isinstance(frames, torch.Tensor):
        frames = frames.detach().cpu().numpy()
    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ShapeMismatchError(f"Frames must be [T, H, W, 3]; got shape {tuple(arr.shape)}.")
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if np.issubdtype(arr.dtype, np.floating):
        return np.ascontiguousarray(np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8))
    if np.issubdtype(arr.dtype, np.integer):
        return np.ascontiguousarray(np.clip(arr, 0, 255).astype(np.uint8))
    raise ShapeMismatchError(f"Frames must be uint8 or float; got dtype {arr.dtype}.")


def chunk_bounds(num_frames: int, num_chunks: int) -> list[tuple[int, int]] | None:
    """(start, stop) frame indices of each chunk, or None (with a warning) when T < N."""
    if num_chunks < 1:
        raise ConfigError(f"chunks must be >= 1; got {num_chunks}.")
    if num_frames < num_chunks:
        log.warning("Video has %d frames, fewer than %d chunks; skipping it.", num_frames, num_chunks)
        return None
    frames_per_chunk = num_frames // num_chunks
    return [(i * frames_per_chunk, (i + 1) * frames_per_chunk) for i in range(num_chunks)]


def split_chunks(frames: Any, num_chunks: int = 10) -> list[np.ndarray] | None:
    """Cut [T, H, W, 3] frames into N equal chunks (remainder dropped); None when T < N."""
    arr = frames if isinstance(frames, np.ndarray) else to_uint8_frames(frames)
    bounds = chunk_bounds(len(arr), num_chunks)
    if bounds is None:
        return None
    return [arr[a:b] for a, b in bounds]


def start_end_bounds(num_frames: int, ratio: float = START_END_RATIO, min_frames: int = 1) -> tuple[range, range]:
    """Index ranges of FramePack's V_start and V_end: the first and last ⌊ratio·T⌋ frames (≥ min_frames)."""
    n = min(num_frames, max(min_frames, int(num_frames * ratio)))
    return range(0, n), range(num_frames - n, num_frames)


def dynamic_stride(fps: float) -> int:
    """Frame stride that samples about 8 fps, as VBench `dynamic_degree.py::get_frames` does."""
    return max(1, round(fps / 8))
