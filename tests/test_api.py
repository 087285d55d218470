"""The core API on tiny models: streamed decode == full decode, sinks, schedules, start frames, plans, profile text."""

from __future__ import annotations

import dataclasses

import av
import numpy as np
import pytest
import torch

from inferix_core.api import PromptSchedule, generate_video, pixels_to_uint8
from inferix_core.cache import KVCacheConfig
from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.models.registry import WorldModel
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import SamplingConfig
from inferix_core.sinks import Mp4Sink
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES, read_fixture


def tiny_world(action_names=()) -> WorldModel:
    torch.manual_seed(0)
    cfg = WanConfig(
        dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=2, action_dim=len(action_names)
    )
    tr = CausalWanTransformer(cfg).eval()
    _, t = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    vae = WanVAE.from_state_dict({k[8:]: v for k, v in t.items() if k.startswith("weights.")}).eval()
    return WorldModel(
        "bundled",
        cfg,
        SamplingConfig(block_frames=2),
        KVCacheConfig(),
        tr,
        vae,
        default_context=torch.randn(1, 4, 8),
        action_names=tuple(action_names),
        fps=16,
    )


def test_streamed_frames_equal_full_decode_and_reach_the_sink(tmp_path):
    wm = tiny_world()
    path = tmp_path / "out.mp4"
    res = generate_video(wm, "", num_blocks=3, width=48, height=32, seed=1, sinks=[Mp4Sink(path, fps=16)])
    assert res.latents.shape == (1, 6, 16, 4, 6)
    full = pixels_to_uint8(wm.vae.decode(res.latents.permute(0, 2, 1, 3, 4)))
    assert res.frames.shape == full.shape == (1 + 4 * 5, 32, 48, 3)
    assert np.abs(res.frames.astype(int) - full.astype(int)).max() <= 1  # rounding of equal floats
    with av.open(str(path)) as f:
        assert sum(1 for _ in f.decode(video=0)) == res.frames.shape[0]
    assert res.first_frame_seconds is not None and res.first_frame_seconds <= res.seconds


def test_prompt_schedule_and_actions():
    wm = tiny_world(action_names=("left", "right", "straight"))
    a = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=2, actions=["left", "left"], decode=False)
    b = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=2, actions=["left", "right"], decode=False)
    assert torch.equal(a.latents[:, :2], b.latents[:, :2]) and not torch.equal(a.latents, b.latents)
    sched = PromptSchedule(((0.0, torch.randn(1, 4, 8)), (1.0, torch.randn(1, 4, 8))))
    c = generate_video(wm, sched, num_blocks=3, width=48, height=32, seed=2, decode=False, actions=["left"] * 3)
    assert torch.isfinite(c.latents).all()
    with pytest.raises(ConfigError, match="unknown actions"):
        generate_video(wm, "", num_blocks=1, width=48, height=32, actions=["jump"], decode=False)
    with pytest.raises(ConfigError, match=r"multiples of 16 .*got 40x32, try 32x32"):
        generate_video(wm, "", num_blocks=1, width=40, height=32, decode=False)


def test_seconds_and_action_schedule_map_to_blocks():
    from inferix_core.api import ActionSchedule, seconds_per_block, seconds_to_blocks

    wm = tiny_world(action_names=("left", "right", "straight"))
    assert seconds_per_block(wm) == 2 * 4 / 16  # 2 latent frames × stride 4 at 16 fps
    # N blocks decode to 8N − 3 frames: 0.5 s (8 frames) needs 2 blocks, 2 s (32 frames) 5
    assert [seconds_to_blocks(wm, s) for s in (0.1, 0.5, 0.51, 2.0)] == [1, 2, 2, 5]
    sched = ActionSchedule(((0.0, "left"), (0.9, "right"), (5.0, "straight")))  # 0.9 s → nearest boundary: block 2
    assert sched.per_block(wm, 4) == ["left", "left", "right", "right"]  # 5 s is past the end: dropped
    a = generate_video(wm, "", num_blocks=4, width=48, height=32, seed=3, actions=sched, decode=False)
    b = generate_video(wm, "", num_blocks=4, width=48, height=32, seed=3, actions=sched.per_block(wm, 4), decode=False)
    assert torch.equal(a.latents, b.latents)
    with pytest.raises(ConfigError, match="unknown actions"):
        ActionSchedule(((0.0, "jump"),)).per_block(wm, 1)
    with pytest.raises(ConfigError, match="start with an entry at 0"):
        ActionSchedule(((1.0, "left"),))


def test_start_frames_trim_pad_and_continue():
    from inferix_core.api import encode_start_frames

    wm = tiny_world()
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (10, 32, 48, 3), generator=g, dtype=torch.uint8)
    latents = encode_start_frames(wm, frames, 48, 32)
    # 10 frames encode to 3 latent frames; whole 2-frame blocks keep 2, i.e. the newest 1 + 4 pixel frames
    newest = (frames[-5:].float() / 127.5 - 1).permute(3, 0, 1, 2).unsqueeze(0)
    assert latents.shape == (1, 2, 16, 4, 6)
    assert torch.allclose(latents, wm.vae.encode(newest).permute(0, 2, 1, 3, 4), atol=1e-5)
    one = encode_start_frames(wm, frames[:1].float() / 255, 48, 32)  # a single float image pads to one block
    assert one.shape == (1, 2, 16, 4, 6)
    res = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=1, start_frames=frames, decode=False)
    assert res.latents.shape[1] == 2 + 2 * 2 and torch.equal(res.latents[:, :2], latents)
    with pytest.raises(ShapeMismatchError, match="resize"):
        encode_start_frames(wm, frames[:, :16], 48, 32)
    no_vae = dataclasses.replace(wm, vae=None)
    with pytest.raises(ConfigError, match="VAE with an encoder"):
        encode_start_frames(no_vae, frames, 48, 32)


def test_decode_video_streams_and_hooks_see_kv_memory(tmp_path):
    from inferix_core.api import GenerationHooks, decode_video

    class Recorder(GenerationHooks):
        def __init__(self):
            self.timings = []

        def on_block_end(self, index, frames, timings):
            self.timings.append(timings)

    wm, rec = tiny_world(), Recorder()
    res = generate_video(
        wm, "", num_blocks=2, width=48, height=32, seed=4, hooks=rec, sinks=[Mp4Sink(tmp_path / "v.mp4", fps=16)]
    )
    assert res.files == (str(tmp_path / "v.mp4"),)
    assert all(t["kv_gpu_bytes"] > 0 and t["kv_host_bytes"] == 0 for t in rec.timings)
    assert rec.timings[1]["kv_gpu_bytes"] >= rec.timings[0]["kv_gpu_bytes"]
    dec = Recorder()
    frames = decode_video(wm, res.latents, dec, block_frames=1)
    assert np.abs(frames.astype(int) - res.frames.astype(int)).max() <= 1 and len(dec.timings) == 4


def test_format_profile_and_budget_check():
    from inferix_core.api import check_plan, plan_run
    from inferix_core.errors import CacheBudgetError
    from inferix_core.profiling import Profiler, ProfileReport, format_profile

    wm = tiny_world()
    res = generate_video(wm, "", num_blocks=2, width=48, height=32, profiler=Profiler("cpu"))
    text = format_profile(ProfileReport.from_dict(res.profile))
    assert f"{res.frames.shape[0]} frames in" in text and "peak KV cache" in text and "block 1:" in text
    plan = plan_run(wm, KVCacheConfig(window_frames=4), 48, 32, num_blocks=3)
    assert check_plan(plan) == KVCacheConfig(window_frames=4) and "Memory plan" in plan.describe()
    tight = plan_run(wm, KVCacheConfig(window_frames=4, gpu_budget_bytes=64), 48, 32, num_blocks=3)
    with pytest.raises(CacheBudgetError, match="KV cache needs"):
        check_plan(tight)


class _CountingDecoder:
    """Wraps a decoder and counts the stream decoders opened on it (which module a run decoded with)."""

    def __init__(self, inner):
        self.inner, self.opened = inner, 0

    def parameters(self):
        return self.inner.parameters()

    def stream_decoder(self):
        self.opened += 1
        return self.inner.stream_decoder()


def test_one_decoder_choice_for_generate_decode_and_session(caplog):
    """generate_video, decode_video and InteractiveSession decode with `choose_decoder`'s module: the preview
    decoder when asked and loaded, else the VAE (logged), and refuse a model without a VAE."""
    from inferix_core.api import choose_decoder, decode_video
    from inferix_core.clients.session import InteractiveSession

    wm = tiny_world()
    preview = _CountingDecoder(wm.vae)
    with_preview = dataclasses.replace(wm, preview_decoder=preview)
    assert choose_decoder(with_preview, "preview") is preview and choose_decoder(with_preview, "vae") is wm.vae
    with caplog.at_level("INFO", logger="inferix_core.engine.run_output"):
        assert choose_decoder(wm, "preview") is wm.vae
    assert "no preview decoder" in caplog.text
    res = generate_video(with_preview, "", num_blocks=1, width=48, height=32, decoder="preview")
    decode_video(with_preview, res.latents, decoder="preview")
    InteractiveSession(with_preview, width=48, height=32, decoder="preview").close()
    generate_video(with_preview, "", num_blocks=1, width=48, height=32)  # the VAE: the preview is not opened
    assert preview.opened == 3
    no_vae = dataclasses.replace(wm, vae=None)
    for run in (
        lambda: generate_video(no_vae, "", num_blocks=1, width=48, height=32),
        lambda: decode_video(no_vae, res.latents),
        lambda: InteractiveSession(no_vae, width=48, height=32),
    ):
        with pytest.raises(ConfigError, match="needs a VAE"):
            run()
    assert generate_video(no_vae, "", num_blocks=1, width=48, height=32, decode=False).frames is None
