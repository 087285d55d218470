"""InteractiveSession on tiny random models: block-boundary semantics, prompt switch (hard and re-cache),
action order, pause/resume/stop, parity with the pipeline, the ring cache's restart(), and the profiler's FPS."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from inferix_core.api import actions_to_tensor, generate_video
from inferix_core.cache import KVCacheConfig, KVCacheSpec, RingKVCache
from inferix_core.clients.session import InteractiveSession
from inferix_core.errors import ConfigError
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from inferix_core.pipeline.block_diffusion import SeededNoise
from inferix_core.profiling import Profiler
from tests.test_api import tiny_world

ACTIONS = ("left", "right", "straight")
WINDOW = KVCacheConfig(window_frames=6, sink_frames=2)  # 2-frame blocks: the window slides after 3 blocks


@pytest.fixture(scope="module")
def world():
    return tiny_world(action_names=ACTIONS)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(7)
    return {name: torch.randn(1, 4, 8, generator=g) for name in ("start", "beach", "snow")}


def make(world, prompts, **kw) -> InteractiveSession:
    kw.setdefault("decode", False)
    return InteractiveSession(world, "start", width=48, height=32, seed=3, prompt_encoder=prompts.__getitem__, **kw)


# -- ring cache restart (the minimal addition the re-cache needs) --------------------------------------
def test_ring_restart_rebases_the_window_after_the_sinks():
    spec = KVCacheSpec(num_layers=1, num_heads=1, head_dim=2, frame_tokens=1, block_frames=2)
    cache = RingKVCache(KVCacheConfig(window_frames=6, sink_frames=2), spec)
    kv = torch.arange(2.0).view(1, 2, 1, 1).expand(1, 2, 1, 2)
    cache.begin(0, 2)
    cache.layer(0).update(kv, kv)
    with pytest.raises(ConfigError, match="would go back"):
        cache.restart(1)
    cache.restart(11)  # frames 2..10 count as evicted; (11 − 2) mod 4 ≠ 0, so the ring really re-bases
    assert cache.resident_frames() == [0, 1] and cache.end_frame == 11
    assert [cache.slot_of(f) for f in (11, 12, 13, 14, 15)] == [2, 3, 4, 5, 2]
    cache.begin(11, 2)
    k, _ = cache.layer(0).update(kv + 11, kv + 11)
    assert cache.attended_tokens == 4 and k[0, :, 0, 0].tolist() == [0, 1, 11, 12]  # valid slots stay a prefix
    assert cache.resident_frames() == [0, 1, 11, 12]
    cache.begin(13, 2)
    cache.begin(15, 2)  # wraps: frames 11, 12 leave the window as in a normal run
    assert cache.resident_frames() == [0, 1, 13, 14, 15, 16]
    cache.reset()
    assert cache.slot_of(2) == 2 and cache.resident_frames() == []
    with pytest.raises(ConfigError, match="sink frames first"):
        cache.restart(4)
    with pytest.raises(ConfigError, match="global"):
        RingKVCache(KVCacheConfig(), spec).restart(4)


# -- parity with the pipeline --------------------------------------------------------------------------
def test_hard_switch_session_equals_pipeline_with_schedule_and_actions(world, prompts):
    """Inputs queued before a boundary == the pipeline's prompt_schedule/actions for that block (bitwise)."""
    per_block = ["left", "right", "right", "straight", "left"]
    with make(world, prompts, hard_switch=True, cache=WINDOW) as session:
        outs = []
        for i, name in enumerate(per_block):
            session.act(name)
            if i == 3:
                session.switch_prompt("beach")
            outs.append(session.step().latents)
    assert session.action_log == per_block
    pipe = BlockDiffusionPipeline(world.transformer, world.sampling, WINDOW)
    req = GenerationRequest(
        num_blocks=5,
        latent_height=4,
        latent_width=6,
        context=prompts["start"],
        noise=SeededNoise(3),
        actions=actions_to_tensor(world, per_block, 10),
        prompt_schedule=[(3, prompts["beach"])],
    )
    assert torch.equal(torch.cat(outs, dim=1), pipe.generate(req))


def test_prompt_arriving_during_a_block_applies_exactly_at_the_next_boundary(world, prompts):
    class SwitchDuringBlock:  # a sink runs inside step(), i.e. while block 1 is being produced
        def write(self, frames, index):
            if index == 1:
                session.switch_prompt("beach")

        def close(self):
            pass

    session = make(world, prompts, hard_switch=True, decode=True, sinks=[SwitchDuringBlock()])
    start_k = session.state.text.keys[0].clone()
    blocks = [session.step() for _ in range(3)]
    assert session.state.text.keys[0].shape == start_k.shape
    assert [b.prompt for b in blocks] == ["start", "start", "beach"]
    assert [b.prompt_switched for b in blocks] == [False, False, True]
    assert session.prompt_log == [(0, "start"), (2, "beach")]
    want = world.transformer.prepare_context(prompts["beach"])
    assert torch.equal(session.state.text.keys[0], want.keys[0]) and not torch.equal(start_k, want.keys[0])
    session.close()


# -- re-cache ------------------------------------------------------------------------------------------
def test_recache_rewrites_resident_kv_and_the_hard_switch_does_not(world, prompts):
    hard, soft = make(world, prompts, hard_switch=True, cache=WINDOW), make(world, prompts, cache=WINDOW)
    for s in (hard, soft):
        for _ in range(4):  # 8 frames: the window (sink 0-1, ring 4-7) has slid past frames 2-3
            s.step()
    assert soft.state.cache.resident_frames() == [0, 1, 4, 5, 6, 7]
    kv_before = [t.clone() for t in soft.state.cache.logical_kv(1)]  # layer 0 K/V precede any cross-attention
    for s in (hard, soft):
        s.pipeline.set_prompt(s.state, prompts["beach"])
    assert soft.recache() and soft.num_recaches == 1
    hk, _ = hard.state.cache.logical_kv(1)
    sk, _ = soft.state.cache.logical_kv(1)
    assert torch.equal(hk, kv_before[0])  # hard switch: the old prompt's K/V stay
    assert soft.state.cache.resident_frames() == [0, 1, 4, 5, 6, 7] and soft.state.cache.end_frame == 8
    assert not torch.allclose(sk, hk)  # every resident frame re-cached under "beach"
    ft = soft.state.cache.spec.frame_tokens
    assert not torch.allclose(sk[:, : 2 * ft], hk[:, : 2 * ft])  # the sink block too
    # and the next block sees different context
    assert not torch.equal(hard.step().latents, soft.step().latents)


def test_recache_under_the_same_prompt_reproduces_the_cache(world, prompts):
    """With nothing evicted (global cache) the re-run context passes see exactly what the originals saw."""
    session = make(world, prompts)
    for _ in range(3):
        session.step()
    before = [t.clone() for t in session.state.cache.logical_kv(1)]
    session.recache()
    after = session.state.cache.logical_kv(1)
    torch.testing.assert_close(after[0], before[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(after[1], before[1], atol=1e-6, rtol=0)
    # with a sliding window the sink block is re-run first, alone, exactly as it was generated
    windowed = make(world, prompts, cache=WINDOW)
    for _ in range(4):
        windowed.step()
    sink_before = windowed.state.cache.logical_kv(1)[0][:, : 2 * windowed.state.cache.spec.frame_tokens].clone()
    windowed.recache()
    sink_after = windowed.state.cache.logical_kv(1)[0][:, : 2 * windowed.state.cache.spec.frame_tokens]
    torch.testing.assert_close(sink_after, sink_before, atol=1e-6, rtol=0)


def test_prompt_switch_via_input_recaches_at_the_boundary(world, prompts):
    session = make(world, prompts, cache=WINDOW)
    session.step()
    session.switch_prompt("snow")
    session.switch_prompt("beach")  # both at one boundary: both logged, only the last needs K/V
    block = session.step()
    assert block.prompt == "beach" and block.recache_s > 0 and session.num_recaches == 1
    assert session.prompt_log == [(0, "start"), (1, "snow"), (1, "beach")]


# -- actions, pause, resume, stop ----------------------------------------------------------------------
def test_actions_queue_one_per_block_while_other_inputs_apply_at_the_next_boundary(world, prompts):
    session = make(world, prompts, hard_switch=True)
    session.act("left")
    session.switch_prompt("beach")
    session.act("right")
    session.act("right")
    blocks = [session.step() for _ in range(2)]
    assert [b.action for b in blocks] == ["left", "right"]
    assert [b.prompt for b in blocks] == ["beach", "beach"]  # the prompt did not wait behind the actions
    session.pause()
    session.act("straight")
    assert session.step() is None and session.paused  # paused: nothing generated, actions kept in order
    assert session.step() is None and session.pending_inputs == 2
    session.resume()
    assert [session.step().action for _ in range(3)] == ["right", "straight", "straight"]  # then held
    assert session.action_log == ["left", "right", "right", "straight", "straight"]
    assert session.pending_inputs == 0
    session.act("left")
    session.stop()
    assert session.step() is None and session.stopped and session.pending_inputs == 1  # reported, not lost


def test_without_holding_actions_fall_back_to_the_default(world, prompts):
    session = make(world, prompts, hold_actions=False, default_action="straight")
    session.act("left")
    assert [session.step().action for _ in range(3)] == ["left", "straight", "straight"]
    with pytest.raises(ConfigError, match="unknown action"):
        make(world, prompts, default_action="jump")


def test_run_until_stop_from_another_thread(world, prompts):
    session = make(world, prompts)
    session.pause()
    seen = []

    def drive():
        time.sleep(0.2)
        session.act("left")
        session.resume()
        while len(seen) < 2:
            time.sleep(0.01)
        session.stop()

    thread = threading.Thread(target=drive)
    thread.start()
    done = session.run(on_block=seen.append)
    thread.join()
    assert session.stopped and done == len(seen) >= 2 and seen[0].action == "left"
    assert session.step() is None  # stopped for good
    session.close()
    with pytest.raises(ConfigError, match="closed"):
        session.step()


def test_run_max_blocks(world, prompts):
    session = make(world, prompts)
    assert session.run(max_blocks=2) == 2 and session.num_blocks == 2


# -- profiler wired into generate_video ----------------------------------------------------------------
def test_generate_video_profiler_fps_matches_an_independent_clock(world):
    class Clock:
        def __init__(self):
            self.frames, self.last_s = 0, None

        def write(self, frames, index):
            self.frames += len(frames)
            self.last_s = time.perf_counter()

        def close(self):
            pass

    clock, profiler = Clock(), Profiler("cpu")
    t0 = time.perf_counter()
    res = generate_video(
        world, "", num_blocks=3, width=48, height=32, seed=1, sinks=[clock], profiler=profiler, actions=["left"] * 3
    )
    report = res.profile
    assert report["num_frames"] == clock.frames == res.frames.shape[0]
    # the test's clock starts before the profiler's and stops (last sink write) just before the block closes
    assert report["fps"] == pytest.approx(clock.frames / (clock.last_s - t0), rel=0.03)
    totals = report["stage_totals"]
    steps = len(world.sampling.denoising_steps)
    # the last block's context pass is skipped: this run keeps no world state (GenerationRequest.final_context_pass)
    assert totals["denoise"]["count"] == 3 * steps and totals["context_pass"]["count"] == 2
    assert {"text_encode", "decode", "sink"} <= set(totals)
    assert len(report["kv_cache"]) == 3 and report["kv_cache"][-1]["stats"]["frames_written"] == 6


def test_the_sinks_get_a_block_before_its_context_pass_and_nothing_stays_pending(world, prompts):
    """step() decodes and hands the frames out first, then writes the block's K/V, all before it returns."""
    log = []

    class Sink:
        def write(self, frames, index):
            log.append(("frames", index))

        def close(self):
            pass

    session = make(world, prompts, decode=True, sinks=[Sink()])
    real = session.pipeline.context_pass

    def spy(state, latents, start_frame, action=None):
        log.append(("context_pass", start_frame // world.sampling.block_frames))
        return real(state, latents, start_frame, action)

    session.pipeline.context_pass = spy
    with session:
        for _ in range(3):
            session.act("left")
            session.step()
            assert session.state.pending_context is None
    events = [e for k, e in enumerate(log) if k == 0 or e != log[k - 1]]  # block 0 comes as frame 0, then the rest
    assert events == [e for i in range(3) for e in (("frames", i), ("context_pass", i))]
