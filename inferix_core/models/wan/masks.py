"""The attention mask the block loop's KV cache implies, written out densely: the reference the cache is tested
against (a token sees its own block and earlier ones, within the window and the sink)."""

from __future__ import annotations

import torch


def block_causal_mask(
    num_frames: int,
    frame_tokens: int,
    block_frames: int,
    window_frames: int = -1,
    sink_frames: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean (L, L) mask equal to what the KV cache lets each token see.

    A token of block q sees frame f iff f < end(q) (its own block and earlier ones) and, with a window,
    f is a sink frame (f < sink_frames) or one of the window − sink frames ending at end(q).
    """
    frame = torch.arange(num_frames, device=device)
    block_end = (frame // block_frames + 1) * block_frames  # end frame of each frame's block
    q_end = block_end.unsqueeze(1)  # (F, 1) over query frames
    k = frame.unsqueeze(0)  # (1, F) over key frames
    visible = k < q_end
    if window_frames != -1:
        visible &= (k < sink_frames) | (k >= q_end - (window_frames - sink_frames))
    return visible.repeat_interleave(frame_tokens, 0).repeat_interleave(frame_tokens, 1)
