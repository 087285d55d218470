"""The teacher-forcing forward (one masked full-sequence call) equals the cached block-by-block path."""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache.ring import RingKVCache
from inferix_core.cache.spec import KVCacheConfig, KVCacheSpec
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from training.train_world import teacher_forcing_mask


@pytest.mark.parametrize("window", [-1, 6])
def test_teacher_forcing_matches_kv_cache(window: int) -> None:
    torch.manual_seed(0)
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=2, num_heads=2, num_layers=2, action_dim=5)
    model = CausalWanTransformer(cfg).eval()
    num_frames, n, h, w = 9, 3, 4, 4
    clean = torch.randn(1, cfg.in_dim, num_frames, h, w)
    noisy = torch.randn(1, cfg.in_dim, num_frames, h, w)
    t_noisy = torch.tensor([[900.0] * 3 + [600.0] * 3 + [300.0] * 3])
    action = torch.nn.functional.one_hot(torch.randint(0, 5, (1, num_frames)), 5).float()
    ctx = torch.randn(1, 2, cfg.text_dim)
    tokens = cfg.frame_tokens(h, w)
    mask = teacher_forcing_mask(num_frames, tokens, n, window)
    with torch.no_grad():
        full = model(
            torch.cat([clean, noisy], 2),
            torch.cat([torch.zeros_like(t_noisy), t_noisy], 1),
            ctx,
            action=torch.cat([action, action], 1),
            frame_positions=torch.arange(num_frames).repeat(2),
            attn_mask=mask,
        )[:, :, num_frames:]
        spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, tokens, n, max_frames=num_frames)
        cache = RingKVCache(KVCacheConfig(window_frames=window), spec)
        text = model.prepare_context(ctx)
        for b in range(0, num_frames, n):
            cache.begin(b, n)
            flow = model(noisy[:, :, b : b + n], t_noisy[:, b : b + n], text, cache, b, action=action[:, b : b + n])
            torch.testing.assert_close(flow, full[:, :, b : b + n], atol=2e-5, rtol=1e-4)
            cache.begin(b, n)
            model(clean[:, :, b : b + n], torch.zeros(1, n), text, cache, b, action=action[:, b : b + n])
