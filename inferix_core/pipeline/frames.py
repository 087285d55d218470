"""Frame bookkeeping of the block loop: the clean start latents a block holds, how initial latents split into
blocks, and which remembered blocks still have frames in the cache."""

from __future__ import annotations

import torch

from ..errors import ConfigError, ShapeMismatchError


def check_clean_prefix(prefix: torch.Tensor | None, block_shape: tuple[int, ...]) -> torch.Tensor | None:
    """The clean first latents as float32 on the block's device, checked against the block (B, n, C, H, W)."""
    if prefix is None:
        return None
    b, n, c, h, w = block_shape
    if prefix.ndim != 5 or (prefix.shape[0], prefix.shape[2], *prefix.shape[3:]) != (b, c, h, w):
        raise ShapeMismatchError(
            f"clean_first_latents has shape {list(prefix.shape)}; expected [{b}, k, {c}, {h}, {w}] (normalised "
            "latents of the start image, e.g. 1 frame encoded by the model's VAE)"
        )
    if not 0 < prefix.shape[1] < n:
        raise ConfigError(f"clean_first_latents has {prefix.shape[1]} frames; a {n}-frame block holds 1..{n - 1}")
    return prefix.float()


def initial_block_ranges(num_initial: int, block_frames: int, independent_first: bool) -> list[tuple[int, int]]:
    """Frame ranges of the initial latents, split like generated blocks."""
    if num_initial == 0:
        return []
    first = 1 if independent_first else 0
    if (num_initial - first) % block_frames:
        raise ConfigError(
            f"initial latents have {num_initial} frames; expected {'1 + ' if first else ''}a multiple of {block_frames}"
        )
    ranges = [(0, 1)] if first else []
    ranges += [(a, a + block_frames) for a in range(first, num_initial, block_frames)]
    return ranges


def keep_resident(blocks: list, state) -> list:
    """The (start, latents, action) blocks that still have frames in the stream's cache, or among its last
    `state.history_frames` frames (what a "window_reset" re-cache re-writes)."""
    resident = set(state.cache.resident_frames())
    since = state.next_frame - state.history_frames if state.history_frames else None
    return [
        b
        for b in blocks
        if resident.intersection(range(b[0], b[0] + b[1].shape[1]))
        or (since is not None and b[0] + b[1].shape[1] > since)
    ]
