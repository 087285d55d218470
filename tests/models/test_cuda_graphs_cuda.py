"""CUDA-graph replay equals eager on the GPU (models/wan/cuda_graphs.py; skipped without CUDA).

    python -m pytest -m cuda tests/models/test_cuda_graphs_cuda.py -q -rs

fp32 with TF32 off: graph replay vs eager within 1e-5 and vs the authors' fixtures within 1e-4, over every
block of the causal_wan fixtures (the window fixture rolls its ring); bf16 within bf16 tolerance; compiled
blocks inside the graphs; a second run replays only, with no host sync (set_sync_debug_mode("error")).
Every test also checks that graphs really ran (captures, replays, no failed capture, no eager call).
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer, compile_blocks
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.cuda_graphs import enable_cuda_graphs
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from tests.fixture_utils import self_forcing_runs
from tests.pipeline.test_parity import FixtureNoise, build

pytestmark = pytest.mark.cuda
FILES = self_forcing_runs()


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _fixture_run(path, dtype, graphs: bool, compiled: bool = False):
    info, t, model, sampling, cache = build(path)
    model = model.to("cuda", dtype)
    if compiled:
        compile_blocks(model)
    runner = enable_cuda_graphs(model) if graphs else None
    assert (runner is not None) == graphs
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    req = GenerationRequest(p["num_blocks"], H, W, t["text_context"].to(dtype), batch_size=B, noise=FixtureNoise(t))
    out = BlockDiffusionPipeline(model, sampling, cache).generate(req).float().cpu()
    return out, t["output_latents"], runner, p


def _check_graphs_ran(runner, p, runs: int = 1):
    calls = runs * p["num_blocks"] * (len(p["denoising_step_list"]) + 1)
    s = runner.stats
    assert s.failed_captures == 0 and s.eager_calls == 0, s
    assert s.captures >= 1 and s.captures + s.replays == calls, s
    assert s.replays >= calls - p["num_blocks"], s  # at most one capture per block index


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_replay_equals_eager_fp32(path):
    eager, ref, _, _ = _fixture_run(path, torch.float32, graphs=False)
    graphed, _, runner, p = _fixture_run(path, torch.float32, graphs=True)
    assert torch.isfinite(graphed).all()
    _check_graphs_ran(runner, p)
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    torch.testing.assert_close(graphed, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_replay_equals_eager_bf16(path):
    eager, _, _, _ = _fixture_run(path, torch.bfloat16, graphs=False)
    graphed, _, runner, p = _fixture_run(path, torch.bfloat16, graphs=True)
    assert torch.isfinite(graphed).all()
    _check_graphs_ran(runner, p)
    rel = ((graphed - eager).norm() / eager.norm()).item()
    assert rel < 1e-2, rel  # the same kernels on the same values: expected ~0, bf16 tolerance allowed


def _wan_like():
    torch.manual_seed(0)
    cfg = WanConfig(dim=128, ffn_dim=256, freq_dim=64, text_dim=64, text_len=16, num_heads=2, num_layers=4)
    return CausalWanTransformer(cfg).to("cuda").eval().requires_grad_(False)


def _stream(model, cache: KVCacheConfig, blocks: int, seed: int, strict: bool = False):
    sampling = SamplingConfig(block_frames=3)
    context = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(seed))
    req = GenerationRequest(blocks, 8, 12, context, seed=seed)
    pipe = BlockDiffusionPipeline(model, sampling, cache)
    torch.cuda.synchronize()
    if strict:
        torch.cuda.set_sync_debug_mode("error")
    try:
        out = pipe.generate(req)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return out


def test_long_window_roll_and_a_second_run_that_only_replays_without_host_syncs():
    """Window 9 + sink 3 over 8 blocks (the ring rolls 5 times); run 2 captures nothing and never syncs."""
    model = _wan_like()
    cache = KVCacheConfig(window_frames=9, sink_frames=3)
    eager = [_stream(model, cache, 8, seed) for seed in (1, 2)]
    runner = enable_cuda_graphs(model)
    first = _stream(model, cache, 8, 1)
    captures = runner.stats.captures
    assert captures == 3  # 3, 6 frames while filling, then 9 for blocks 2..7
    second = _stream(model, cache, 8, 2, strict=True)
    assert runner.stats.captures == captures and runner.stats.failed_captures == 0
    assert runner.stats.replays == 2 * 8 * 5 - captures and runner.stats.eager_calls == 0
    torch.testing.assert_close(first, eager[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(second, eager[1], atol=1e-5, rtol=0)
    assert runner.held_bytes() > 0
    runner.release()
    assert runner.num_graphs == 0 and runner.held_bytes() == 0


def test_offloaded_cache_falls_back_to_eager_on_the_gpu():
    model = _wan_like()
    cache = KVCacheConfig(window_frames=9, sink_frames=3, offload="always")
    eager = _stream(model, cache, 3, 1)
    runner = enable_cuda_graphs(model)
    graphed = _stream(model, cache, 3, 1)
    assert runner.stats.captures == 0 and runner.stats.eager_calls == 15
    torch.testing.assert_close(graphed, eager, atol=1e-6, rtol=0)


@pytest.mark.parametrize("path", FILES[-1:], ids=lambda f: f.name)  # the window fixture: its ring rolls
def test_compiled_blocks_inside_graphs_fp32(path):
    eager, ref, _, _ = _fixture_run(path, torch.float32, graphs=False, compiled=True)
    graphed, _, runner, p = _fixture_run(path, torch.float32, graphs=True, compiled=True)
    _check_graphs_ran(runner, p)
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    torch.testing.assert_close(graphed, ref, atol=1e-4, rtol=0)
