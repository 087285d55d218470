"""`inferix play` with the LongLive 2.0 family on CPU: a tiny synthetic longlive2 file (the parity fixture's
weights under a LongLive 2.0 name) with the tiny Wan 2.2 VAE, an image start and a shot typed live.

The numbers of a shot and of the image start are checked against the pipeline driven directly; the play
test checks the whole path: family detection, the live view, a typed shot prompt, a playable mp4."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from inferix_core.api import LONGLIVE2_SCENE_CUT_PREFIX
from inferix_core.cache import KVCacheConfig
from inferix_core.clients.session import InteractiveSession
from inferix_core.commands.play import play
from inferix_core.engine.conditioning import encode_start_frames
from inferix_core.models.registry import load_world_model
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from inferix_core.pipeline.block_diffusion import SeededNoise
from tests.test_play import post, read_mjpeg_frames, wait_for_session_event

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = FIXTURES / "longlive2_tiny_t2v.safetensors"
VAE = FIXTURES / "wan22_vae_tiny.safetensors"


class PromptTable:
    """A text encoder stand-in (no umT5 on CPU): a fixed random embedding per prompt text."""

    def __init__(self, text_dim: int):
        self.text_dim, self.table = text_dim, {}

    def encode(self, prompts):
        (p,) = prompts
        if p not in self.table:
            self.table[p] = torch.randn(1, 8, self.text_dim, generator=torch.Generator().manual_seed(len(self.table)))
        return self.table[p]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not (MODEL.exists() and VAE.exists()):
        pytest.skip("needs tests/fixtures/longlive2_tiny_t2v and wan22_vae_tiny")
    named = tmp_path_factory.mktemp("ll2") / "LongLive-2.0-5B_tiny.safetensors"
    shutil.copy(MODEL, named)
    wm = load_world_model(str(named), vae_path=str(VAE), device="cpu", dtype="fp32")
    assert wm.family == "longlive2" and wm.fps == 24
    # a small window so the shot's pin matters within a few blocks; 2-frame blocks keep it fast
    sampling = dataclasses.replace(wm.sampling, block_frames=2)
    return dataclasses.replace(
        wm, text_encoder=PromptTable(wm.config.text_dim), sampling=sampling,
        default_cache=KVCacheConfig(window_frames=6, sink_frames=2),
    )  # fmt: skip


def _image(tmp_path: Path, w: int, h: int) -> Path:
    path = tmp_path / "start.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (h + 7, w - 5, 3), dtype=np.uint8)).save(path)
    return path


def test_session_image_start_and_shot_equal_the_pipeline(world, tmp_path):
    s = world.spatial_compression
    h, w = 4, 6
    image = _image(tmp_path, w * s, h * s)
    cut = LONGLIVE2_SCENE_CUT_PREFIX + "a wolf on ice"
    with InteractiveSession(world, "a fox", width=w * s, height=h * s, start_image=str(image), decode=False) as sess:
        got = [sess.step().latents for _ in range(2)]
        sess.switch_prompt(cut)
        got += [sess.step().latents for _ in range(3)]
    # the image as their ImagePromptDataset reads it: resized to the video size with antialias, no crop
    pixels = torch.from_numpy(np.asarray(Image.open(image), dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255
    pixels = torch.nn.functional.interpolate(pixels[None], size=(h * s, w * s), mode="bilinear", antialias=True)
    one = dataclasses.replace(world.sampling, block_frames=1)
    first = encode_start_frames(world, pixels[0].permute(1, 2, 0)[None], w * s, h * s, one)
    enc = world.text_encoder.encode
    req = GenerationRequest(
        5, h, w, enc(["a fox"]), noise=SeededNoise(0), clean_first_latents=first,
        prompt_schedule=[(2, enc([cut])), (3, enc(["a wolf on ice"]))], shot_blocks=(2,),
    )  # fmt: skip
    want = BlockDiffusionPipeline(world.transformer, world.sampling, world.default_cache).generate(req)
    out = torch.cat(got, dim=1)
    torch.testing.assert_close(out[:, :1], first, atol=0, rtol=0)
    torch.testing.assert_close(out, want, atol=0, rtol=0)


def test_play_longlive2_over_http_with_an_image_and_a_typed_shot(world, tmp_path):
    s = world.spatial_compression
    width, height = 6 * s, 4 * s
    image = _image(tmp_path, width, height)
    ready, views, results = threading.Event(), [], []

    def serve():
        results.append(
            play(world, prompt="a fox", width=width, height=height, port=0, output=tmp_path / "ll2.mp4",
                 start_image=str(image), on_ready=lambda view: (views.append(view), ready.set()))
        )  # fmt: skip

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert ready.wait(120), "live view did not start"
        port = views[0].port
        frames = read_mjpeg_frames(port, 2)
        assert all(f.format == "JPEG" and f.size == (width, height) for f in frames)
        post(port, {"type": "prompt", "text": LONGLIVE2_SCENE_CUT_PREFIX + "a wolf on ice"})
        wait_for_session_event(port, lambda e: e["prompt"] == "a wolf on ice")  # the block after the shot's first
        post(port, {"type": "stop"})
    finally:
        if thread.is_alive() and views:
            views[0].inputs.put({"type": "stop"})
        thread.join(120)
    assert not thread.is_alive()
    result = results[0]
    assert [p for _, p in result.prompt_log] == ["a fox", LONGLIVE2_SCENE_CUT_PREFIX + "a wolf on ice"]
    with av.open(str(result.output)) as f:
        assert sum(1 for _ in f.decode(video=0)) == result.num_frames > 0
