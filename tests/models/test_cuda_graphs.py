"""The CUDA-graph runner's keying and static-buffer logic, on the CPU (models/wan/cuda_graphs.py).

No GPU here, so graphs are emulated with `RecordingBackend`, which keeps the one property of a CUDA
graph that the runner's logic depends on: a replay re-runs exactly what was recorded at capture, with
the tensors (addresses) and host values of that moment. An input that the runner failed to route
through a static buffer, or a host value baked into a graph whose key does not cover it, gives a wrong
replay here as it would on the GPU. tests/models/test_cuda_graphs_cuda.py runs the real thing.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import pytest
import torch

from inferix_core.cache import KVCacheConfig, KVCacheSpec
from inferix_core.cache.ring import RingKVCache
from inferix_core.errors import ConfigError
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.cuda_graphs import CudaGraphBackend, CudaGraphRunner, enable_cuda_graphs
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from tests.fixture_utils import self_forcing_runs
from tests.pipeline.test_parity import FixtureNoise, build

FILES = self_forcing_runs()


@dataclass
class _Recorded:
    fn: object
    out: torch.Tensor


class RecordingBackend:
    """CPU stand-in for CUDA graphs: capture keeps the closure, replay re-runs it into the static output."""

    def __init__(self):
        self.captured: list[_Recorded] = []

    def supports(self, device):
        return None

    def warmup(self, fn):
        return fn()

    def capture(self, fn):
        rec = _Recorded(fn, fn().clone())  # the output buffer a graph would own (the call is idempotent)
        self.captured.append(rec)
        return rec, rec.out

    def replay(self, graph):
        graph.out.copy_(graph.fn())

    def pool_bytes(self):
        return 0


def _request(info, t, sampling, num_blocks=None):
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    return GenerationRequest(
        num_blocks or p["num_blocks"],
        H,
        W,
        t["text_context"],
        batch_size=B,
        noise=FixtureNoise(t),
    )


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_replay_equals_eager_on_the_fixtures(path):
    """Every call after a key's first replays a graph; the latents equal eager and the authors' within 1e-5 / 1e-4."""
    info, t, model, sampling, cache = build(path)
    eager = BlockDiffusionPipeline(model, sampling, cache).generate(_request(info, t, sampling))
    runner = enable_cuda_graphs(model, RecordingBackend())
    assert model.cuda_graphs is runner
    graphed = BlockDiffusionPipeline(model, sampling, cache).generate(_request(info, t, sampling))
    assert torch.isfinite(graphed).all()
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    torch.testing.assert_close(graphed, t["output_latents"], atol=1e-4, rtol=0)
    p = info["pipeline"]
    calls = p["num_blocks"] * (len(p["denoising_step_list"]) + 1)
    assert runner.stats.eager_calls == 0
    assert runner.stats.captures + runner.stats.replays == calls
    assert runner.stats.replays >= calls - p["num_blocks"]  # at most one capture per block index


def _tiny(window=-1, sink=0, block=2):
    torch.manual_seed(0)
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=16, text_len=8, num_heads=2, num_layers=2)
    model = CausalWanTransformer(cfg).eval().requires_grad_(False)
    sampling = SamplingConfig((1000, 500), warp_denoising_steps=True, shift=5.0, block_frames=block)
    return model, sampling, KVCacheConfig(window_frames=window, sink_frames=sink)


def _run(model, sampling, cache, blocks, seed=0, schedule=()):
    context = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(seed))
    req = GenerationRequest(blocks, 4, 6, context, seed=seed, prompt_schedule=list(schedule))
    return BlockDiffusionPipeline(model, sampling, cache).generate(req)


def test_window_fill_then_one_steady_state_graph():
    """Window 6 (sink 2), 2-frame blocks: 2, 4, 6 frames attended while filling, then 6 for every later block."""
    model, sampling, cache = _tiny(window=6, sink=2)
    eager = _run(model, sampling, cache, blocks=7)
    runner = enable_cuda_graphs(model, RecordingBackend())
    graphed = _run(model, sampling, cache, blocks=7)
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    assert runner.num_graphs == 3  # blocks 0, 1, then the steady state from block 2 on (the ring rolls from block 3)
    assert runner.stats.replays == 7 * 3 - 3


def test_graphs_survive_runs_and_the_cache_is_reused():
    """A second run of the same geometry captures nothing: the held cache keeps its storage."""
    model, sampling, cache = _tiny()
    eager = [_run(model, sampling, cache, blocks=3, seed=s) for s in (1, 2)]
    runner = enable_cuda_graphs(model, RecordingBackend())
    first = _run(model, sampling, cache, blocks=3, seed=1)
    held = weakref.ref(runner._held_cache)  # a strong reference here would count as a stream holding it
    captures = runner.stats.captures
    second = _run(model, sampling, cache, blocks=3, seed=2)
    assert runner._held_cache is held() and runner.stats.captures == captures == 3
    torch.testing.assert_close(first, eager[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(second, eager[1], atol=1e-5, rtol=0)


def test_a_cache_still_held_elsewhere_is_not_reused():
    model, _, cache = _tiny()
    runner = enable_cuda_graphs(model, RecordingBackend())
    spec = KVCacheSpec(num_layers=2, num_heads=2, head_dim=16, frame_tokens=6, block_frames=2, max_frames=6)
    first = runner.kv_cache(cache, spec)
    state = type("State", (), {})()  # a stream that is still running: its state leases the cache
    runner.lease(first, state)
    second = runner.kv_cache(cache, spec)
    assert second is not first
    runner.lease(second, type("State", (), {})())  # a stream whose state is gone at once: no lease left
    assert runner.kv_cache(cache, spec) is second
    runner.lease(second, state)
    del state, first
    assert runner.kv_cache(cache, spec) is second  # the stream ended
    held = weakref.ref(second)
    del second
    other = KVCacheSpec(num_layers=2, num_heads=2, head_dim=16, frame_tokens=6, block_frames=2, max_frames=8)
    assert runner.kv_cache(cache, other) is not held()  # another geometry: a new cache


def test_prompt_switch_copies_the_new_prompt_into_the_static_buffers():
    model, sampling, cache = _tiny()
    switch = [(2, torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(7)))]
    eager = _run(model, sampling, cache, blocks=4, schedule=switch)
    enable_cuda_graphs(model, RecordingBackend())
    graphed = _run(model, sampling, cache, blocks=4, schedule=switch)
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    assert (graphed[:, 4:] - _run(model, sampling, cache, blocks=4)[:, 4:]).abs().max() > 1e-3  # the switch mattered


def test_uncapturable_calls_run_eagerly_and_say_why_once(caplog):
    """A paged cache has no graph key: every call runs eagerly, the reason is logged once, results unchanged."""
    model, sampling, _ = _tiny()
    paged = KVCacheConfig(page_frames=2)
    eager = _run(model, sampling, paged, blocks=3)
    runner = enable_cuda_graphs(model, RecordingBackend())
    with caplog.at_level(logging.WARNING, logger="inferix_core.models.wan.cuda_graphs"):
        graphed = _run(model, sampling, paged, blocks=3)
    torch.testing.assert_close(graphed, eager, atol=0, rtol=0)
    assert runner.stats.captures == 0 and runner.stats.eager_calls == 9
    messages = [r.getMessage() for r in caplog.records if "CUDA graphs off" in r.getMessage()]
    assert len(messages) == 1 and "PagedKVCache" in messages[0]


def test_enable_on_cpu_is_refused_with_a_logged_reason(caplog):
    model, _, _ = _tiny()
    with caplog.at_level(logging.WARNING, logger="inferix_core.models.wan.cuda_graphs"):
        assert enable_cuda_graphs(model) is None
    assert model.cuda_graphs is None
    assert any("not a CUDA device" in r.getMessage() for r in caplog.records)
    assert CudaGraphBackend().supports(torch.device("cpu")) is not None


def test_block_swap_and_cudagraph_compile_modes_are_refused():
    model, _, _ = _tiny()
    runner = CudaGraphRunner(model, RecordingBackend())
    x = torch.zeros(1, 16, 2, 4, 6)
    model.compile_mode = "reduce-overhead"
    assert "reduce-overhead" in runner.unsupported(x, object(), None)
    model.compile_mode = "default"
    model.block_swap = type("Swap", (), {"swapped": [1]})()
    assert "block swap" in runner.unsupported(x, object(), None)
    del model.block_swap
    assert "action" in runner.unsupported(x, object(), torch.zeros(1))


def test_ring_graph_key_is_stable_in_steady_state_and_covers_shapes():
    spec = KVCacheSpec(num_layers=2, num_heads=2, head_dim=4, frame_tokens=3, block_frames=2)
    cache = RingKVCache(KVCacheConfig(window_frames=6, sink_frames=2), spec)
    with pytest.raises(ConfigError):
        cache.graph_key()
    keys = []
    for start in range(0, 14, 2):
        cache.begin(start, 2)
        keys.append(cache.graph_key())
    assert len({k[2] for k in keys}) == 3  # attended tokens 6, 12, 18 while the window fills
    assert keys[2] == keys[3] == keys[6]  # the ring rolls (different slots) under one key
    assert cache._w.tolist() != [] and keys[3][3] == keys[6][3]  # the write index keeps its storage
    cache.begin(14, 1)  # a 1-frame call (e.g. an independent first frame) is another shape
    assert cache.graph_key() != keys[6]


def test_a_copied_model_does_not_replay_its_originals_graphs():
    """deepcopy carries the runner along; the copy (other weights) must run eagerly, not the original's graphs."""
    import copy

    model, sampling, cache = _tiny()
    runner = enable_cuda_graphs(model, RecordingBackend())
    _run(model, sampling, cache, blocks=2)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(1.01)
    twin.cuda_graphs = runner  # as deepcopy would leave it if the runner were shared
    before = runner.stats.replays + runner.stats.captures
    out = _run(twin, sampling, cache, blocks=2)
    assert runner.stats.replays + runner.stats.captures == before
    twin.cuda_graphs = None
    torch.testing.assert_close(out, _run(twin, sampling, cache, blocks=2), atol=0, rtol=0)


def test_a_lora_merge_gives_the_new_transformer_its_own_runner():
    from inferix_core.models.lora import merge_loras_into_transformer

    model, _, _ = _tiny()
    enable_cuda_graphs(model, RecordingBackend())
    merged = merge_loras_into_transformer(model, [])
    assert merged is not model and merged.cuda_graphs is not None and merged.cuda_graphs.model is merged
    assert isinstance(merged.cuda_graphs.backend, RecordingBackend)


def test_a_restored_world_state_keeps_the_lease(tmp_path):
    """world_state.load builds a new StreamState around the held cache: that state holds the lease now."""
    from inferix_core.engine.world_state import load_world_state, save_world_state

    model, sampling, cache = _tiny(window=6, sink=2)
    runner = enable_cuda_graphs(model, RecordingBackend())
    pipe = BlockDiffusionPipeline(model, sampling, cache)
    state = pipe.start_stream(torch.randn(1, 8, 16), 4, 6, seed=3)
    pipe.denoise_block(state)
    assert runner._leased
    path = tmp_path / "world.safetensors"
    identity = {"family": "tiny", "config": {}, "weights": "w"}
    save_world_state(path, pipe, state, identity=identity)
    del state
    assert not runner._leased
    restored = load_world_state(path, pipe, identity=identity)
    assert runner._leased and restored.cache is runner._held_cache
    del restored
    assert not runner._leased


def test_switching_the_attention_backend_captures_anew():
    from inferix_core.models.registry import set_attention_backend

    model, sampling, cache = _tiny()
    runner = enable_cuda_graphs(model, RecordingBackend())
    _run(model, sampling, cache, blocks=2)
    assert runner.num_graphs == 2
    set_attention_backend(model, "sdpa_cudnn")
    eager = runner.model  # the same module: the key must see the new attention function
    _run(eager, sampling, cache, blocks=2)
    assert runner.stats.captures == 4


def test_moved_weights_drop_the_graphs():
    """A graph reads weights by address: after they move (ComfyUI evicts and reloads), graphs are captured anew."""
    model, sampling, cache = _tiny()
    runner = enable_cuda_graphs(model, RecordingBackend())
    _run(model, sampling, cache, blocks=2)
    assert runner.num_graphs == 2
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone() * 1.01  # new storage, as a move to another device and back gives
    eager_model, _, _ = _tiny()
    eager_model.load_state_dict(model.state_dict())
    graphed = _run(model, sampling, cache, blocks=2)
    assert runner.stats.captures == 4  # nothing stale was replayed
    torch.testing.assert_close(graphed, _run(eager_model, sampling, cache, blocks=2), atol=1e-5, rtol=0)
