"""A cache view whose attention span ends in zero keys and values: Krea's KV recompute as their code runs it.

krea-ai/realtime-video `recompute_kv_cache` runs its context frames in one call under a flex-attention block
mask (`wan/modules/causal_model.py`, `get_block_mask`). Queries, keys and values are right-padded with zeros
to a multiple of 128 tokens, and the mask lets a query attend to every key before the end of its block. When
the context's frame count is not a multiple of the block size (kv_cache_num_frames 4 with 3-frame blocks),
the last block's end lies past the real tokens, so its queries also attend to some of the zero keys: each
adds exp(0) to the softmax's denominator and nothing to its numerator. `padding_keys_attended` counts them;
`ZeroKeysView` hands an attention layer the cache's span with that many zero rows after it. What the cache
stores is unchanged (their recompute writes only the real tokens).
"""

from __future__ import annotations

import torch

from .interface import KVCache, LayerKV

FLEX_PAD_MULTIPLE = 128  # `get_block_mask` pads Q_LEN / KV_LEN to a multiple of 128


def padding_keys_attended(context_frames: int, chunk_start: int, chunk_frames: int, frame_tokens: int) -> int:
    """Zero keys the block [chunk_start, chunk_start + chunk_frames) of a recompute over `context_frames`
    attends to: min(block end, padded length) − real length, 0 for a block inside the context."""
    total = context_frames * frame_tokens
    padded = -(-total // FLEX_PAD_MULTIPLE) * FLEX_PAD_MULTIPLE
    end = (chunk_start + chunk_frames) * frame_tokens
    return max(0, min(end, padded) - total)


class ZeroKeysView:
    """`cache` for one transformer call, with `pad_tokens` zero keys and values after each layer's span."""

    def __init__(self, cache: KVCache, pad_tokens: int):
        self._inner = cache
        self.pad_tokens = pad_tokens
        self._views = [LayerKV(self, i) for i in range(cache.spec.num_layers)]

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def layer(self, index: int) -> LayerKV:
        return self._views[index]

    def write_and_read(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self._inner.write_and_read(layer, k, v)
        pad = (k.shape[0], self.pad_tokens, *k.shape[2:])
        return torch.cat([k, k.new_zeros(pad)], dim=1), torch.cat([v, v.new_zeros(pad)], dim=1)
