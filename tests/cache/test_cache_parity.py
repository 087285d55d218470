"""Every cache kind reproduces every reference fixture (tests/fixtures/causal_wan_*.safetensors) within 1e-4.

Same approach as tests/pipeline/test_parity.py (fixtures discovered by glob, settings from metadata), with
the cache implementation as a second parameter. Quantized kinds are not exact and are tested for their
error bounds in test_quant.py instead.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.pipeline import BlockDiffusionPipeline
from tests.fixture_utils import fixture_request
from tests.pipeline.test_parity import ATOL, FILES, Recorder, build

# kind name → overrides of the fixture's KVCacheConfig (window and sink come from the fixture)
KINDS = {
    "ring": {},
    "paged": {"page_frames": 3},
    "paged_p2": {"page_frames": 2},  # pages straddle blocks and the sink boundary
    "offload_all": {"offload": "always"},
    "offload_p1": {"offload": "always", "page_frames": 1},
}
# (a budget that keeps some layers resident and offloads others needs more than the fixtures' 2 layers:
# tests/cache/test_rollout.py covers it with a 4-layer model)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_cache_parity(path, kind):
    info, t, model, sampling, base = build(path)
    cache_cfg = dataclasses.replace(base, **KINDS[kind])
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    rec = Recorder()
    req = fixture_request(p, t)
    out, kv_after, attended, global_end = [], {}, [], []
    for block in pipe.stream(req, rec):
        out.append(block.latents)
        pipe.settle()  # write the block's K/V now (stream() runs its context pass on the next block)
        kv_after[block.index] = pipe.kv_cache.logical_kv(0)
        attended.append(pipe.kv_cache.attended_tokens)
        global_end.append(pipe.kv_cache.end_frame * p["frame_seq_length"])
    cache = pipe.kv_cache
    if kind.startswith("offload"):
        assert type(cache).__name__ == "OffloadedKVCache"
        assert cache.stats()["offloaded_bytes"] > 0
    torch.testing.assert_close(torch.cat(out, dim=1), t["output_latents"], atol=ATOL, rtol=0)
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
        if f"kv_cache.layer0.after_block{b}.k" in t:
            k, v = kv_after[b]
            torch.testing.assert_close(k, t[f"kv_cache.layer0.after_block{b}.k"], atol=ATOL, rtol=0)
            torch.testing.assert_close(v, t[f"kv_cache.layer0.after_block{b}.v"], atol=ATOL, rtol=0)
    tr = info["trace"]
    assert attended == tr["local_end_after_block_layer0"]
    assert global_end == tr["global_end_after_block_layer0"]
    assert cache.num_eviction_events == tr["evictions_per_layer"]
    assert cache.num_calls == tr["model_calls"]
