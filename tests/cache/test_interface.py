"""The KVCache seam: every kind satisfies the Protocol with the one LayerKV view, and restart() keeps the
window right for every kind, checked against a plain dict of what was written (random K/V, so a slot that
was never written again, or holds another frame, shows)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.cache import KVCache, KVCacheConfig, KVCacheSpec, LayerKV, create_kv_cache
from inferix_core.cache.factory import cache_kind
from inferix_core.errors import ConfigError

T, H, D = 2, 2, 4  # frame tokens, heads, head dim
KINDS = {
    "ring": {},
    "paged": {"page_frames": 2},
    "offload": {"page_frames": 2, "offload": "always"},
    "quant": {"quantization": "int8", "residual_frames": 2},
}


def make(kind: str, window: int, sink: int, layers: int = 2):
    sp = KVCacheSpec(num_layers=layers, num_heads=H, head_dim=D, frame_tokens=T, block_frames=2)
    cfg = KVCacheConfig(window_frames=window, sink_frames=sink, **KINDS[kind])
    assert cache_kind(cfg, sp) == kind
    return create_kv_cache(cfg, sp)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_is_a_kv_cache_with_layer_kv_views(kind):
    cache = make(kind, window=6, sink=2)
    assert isinstance(cache, KVCache)
    assert all(type(cache.layer(i)) is LayerKV for i in range(cache.spec.num_layers))


class Written:
    """What each frame's K/V is: the independent reference the caches are checked against."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)
        self.kv: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def call(self, cache, start: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cache.begin(start, n)
        spans = []
        for layer in range(cache.spec.num_layers):
            k, v = torch.randn(2, 1, n * T, H, D, generator=self.g)
            for i in range(n):
                self.kv[(layer, start + i)] = (k[:, i * T : (i + 1) * T], v[:, i * T : (i + 1) * T])
            spans.append(cache.layer(layer).update(k, v))
        return spans


def check(cache, written: Written, live: list[int], exact: bool) -> None:
    assert cache.resident_frames() == live
    assert cache.attended_tokens == len(live) * T
    for layer in range(cache.spec.num_layers):
        k, v = cache.logical_kv(layer)
        want_k = torch.cat([written.kv[(layer, f)][0] for f in live], dim=1)
        want_v = torch.cat([written.kv[(layer, f)][1] for f in live], dim=1)
        if exact:
            assert torch.equal(k, want_k) and torch.equal(v, want_v)
        else:  # int8 min-max: within one step of the range (a wrong or stale frame is off by O(1))
            step = 2 * float(torch.cat([want_k, want_v]).abs().max()) / 255
            torch.testing.assert_close(k, want_k, atol=step, rtol=0)
            torch.testing.assert_close(v, want_v, atol=step, rtol=0)


def span_frames(span: torch.Tensor, written: Written, layer: int, frames: list[int]) -> list[int]:
    """Which written frame each T-token chunk of an attention span is (−1: none of them)."""
    out = []
    for c in range(span.shape[1] // T):
        chunk = span[:, c * T : (c + 1) * T]
        out.append(next((f for f in frames if torch.equal(chunk, written.kv[(layer, f)][0])), -1))
    return out


# restart points W with (W − S) mod R = 1, 2, 3 and 0 (S sink frames, R = window − S ring frames): a
# slot_of that ignores the new origin agrees with the right one only when (W − S) mod R = 0
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("window,sink,restart", [(6, 2, 11), (6, 2, 12), (6, 2, 13), (6, 2, 10), (7, 1, 9)])
def test_restart_against_what_was_written(kind, window, sink, restart):
    cache, written = make(kind, window, sink), Written(seed=restart)
    ring = window - sink
    for start in range(0, 2 * window, 2):  # a full run first, so every slot holds some older frame
        written.call(cache, start, 2)
    cache.reset()
    written.call(cache, 0, 2)  # the sink frames again (a re-cache under a new prompt)
    if sink < 2:
        with pytest.raises(ConfigError, match="would go back"):
            cache.restart(1)
    cache.restart(restart)
    assert cache.end_frame == restart and cache.resident_frames() == list(range(sink))
    exact = kind != "quant"
    for start in range(restart, restart + 3 * ring, 2):
        spans = written.call(cache, start, 2)
        end = start + 2
        live = list(range(sink)) + list(range(max(restart, end - ring), end))
        check(cache, written, live, exact)
        if exact:  # the span a layer attends to holds exactly the live frames (any order: keys carry RoPE)
            for layer, (k_all, _) in enumerate(spans):
                assert sorted(span_frames(k_all, written, layer, live)) == live


@pytest.mark.parametrize("kind", list(KINDS))
def test_restart_refuses_what_it_cannot_do(kind):
    cache = make(kind, window=6, sink=2)
    with pytest.raises(ConfigError, match="sink frames first"):
        cache.restart(4)
    Written(0).call(cache, 0, 2)
    with pytest.raises(ConfigError, match="would go back"):
        cache.restart(1)
    sp = dataclasses.replace(cache.spec, max_frames=8)
    glob = create_kv_cache(KVCacheConfig(**{k: v for k, v in KINDS[kind].items() if k != "offload"}), sp)
    with pytest.raises(ConfigError, match="global"):
        glob.restart(4)
