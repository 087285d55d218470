"""Image-started keyboard/mouse sessions and runs (Matrix-Game 2.0 inputs): what reaches the model, block by block.

The transformer here is a recorder (it returns zero flow and keeps the inputs of every call): these tests check
the conditioning side against the authors' semantics (`cond_current` of pipeline/causal_inference.py at
3ceb3114), not the model. Every call of a block (steps and context pass) must see cond_concat frames
[s, s + n) and action rows [0, 1 + 4·(s + n − 1)), with the block's new rows holding the control state
that was given before the block.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from inferix_core.api import generate_video
from inferix_core.cache import KVCacheConfig
from inferix_core.clients.session import InteractiveSession
from inferix_core.controls import CONTROL_SPECS, block_rows
from inferix_core.engine.schedules import ActionSchedule
from inferix_core.errors import ConfigError
from inferix_core.models.registry import WorldModel
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import SamplingConfig
from inferix_core.vae import WanVAE
from tests.fixture_utils import FIXTURES, read_fixture
from tests.test_api import tiny_world


class RecordingModel(torch.nn.Module):
    """Stands in for the image-started transformer: zero flow, every call's inputs kept."""

    def __init__(self, config: WanConfig):
        super().__init__()
        self.config = config
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.calls: list[tuple[int, object]] = []
        self.contexts: list[torch.Tensor] = []

    def prepare_context(self, context):
        self.contexts.append(context)
        return context

    def forward(self, x, timestep, text, cache, start, action=None):
        self.calls.append((start, action))
        return torch.zeros_like(x)


@dataclasses.dataclass(frozen=True)
class ControlWorld(WorldModel):
    control_variant: str = "universal"


N = 3  # latent frames per block


@pytest.fixture(scope="module")
def vae():
    _, t = read_fixture(FIXTURES / "wan_vae_tiny.safetensors")
    return WanVAE.from_state_dict({k[8:]: v for k, v in t.items() if k.startswith("weights.")}).eval()


def make_world(vae, variant="universal") -> ControlWorld:
    cfg = WanConfig(in_dim=36, out_dim=16, dim=32, ffn_dim=64, freq_dim=16, text_dim=32, text_len=4, num_heads=2,
                    num_layers=1)  # fmt: skip
    return ControlWorld("bundled", cfg, SamplingConfig((1000, 500), block_frames=N), KVCacheConfig(),
                        RecordingModel(cfg), vae, control_variant=variant)  # fmt: skip


@pytest.fixture
def image():
    return np.random.RandomState(3).randint(0, 256, (40, 60, 3), dtype=np.uint8)


def calls_by_block(model: RecordingModel) -> dict[int, list]:
    out: dict[int, list] = {}
    for start, action in model.calls:
        out.setdefault(start, []).append(action)
    return out


def expected_cond(vae, session_pixels, num_latent):
    clip = torch.cat([session_pixels.unsqueeze(2), torch.zeros(1, 3, 4 * (num_latent - 1), 32, 48)], dim=2)
    lat = vae.encode(clip)
    mask = torch.zeros(1, 4, num_latent, *lat.shape[-2:])
    mask[:, :, 0] = 1
    return torch.cat([mask, lat], dim=1)


def test_session_controls_reach_every_call_at_their_frames(vae, image):
    world = make_world(vae)
    tokens = torch.randn(1, 9, 32)
    spec = CONTROL_SPECS["universal"]
    session = InteractiveSession(
        world, width=48, height=32, seed=1, decode=False, start_image=image, clip_vision=tokens
    )
    assert torch.equal(world.transformer.contexts[0], tokens)  # the CLIP tokens are the cross-attention context
    plan = [  # (events before the block, keyboard row, mouse row)
        ([{"keys": ["W"]}], [1, 0, 0, 0], [0.0, 0.0]),
        ([{"keys": ["W", "A"], "look": [60.0, 0.0]}, {"look": [30.0, -45.0]}], [1, 0, 1, 0], None),
        ([{"keys": []}, {"keys": ["S", "J"], "mouse": [0.05, 0.0]}], [0, 1, 0, 0], [0.05, -0.1]),
        ([], [0, 1, 0, 0], [0.05, -0.1]),  # held: nothing new arrived
    ]
    total = 1 + 4 * (len(plan) * N - 1)
    kb = torch.full((total, 4), float("nan"))
    mouse = torch.full((total, 2), float("nan"))
    for b, (events, k, m) in enumerate(plan):
        for e in events:
            session.send({"type": "control", **e})
        session.step()
        lo, hi = block_rows(b * N, N)
        if m is None:  # 90 px right, 45 px up over the block's 12 new rows: the camera turns 90·s right, 45·s up
            m = [45 * spec.look_sensitivity / (hi - lo), 90 * spec.look_sensitivity / (hi - lo)]
        kb[lo:hi] = torch.tensor(k, dtype=torch.float32)
        mouse[lo:hi] = torch.tensor(m, dtype=torch.float32)
    cond = expected_cond(vae, session._image.pixels, len(plan) * N)
    blocks = calls_by_block(world.transformer)
    assert sorted(blocks) == [b * N for b in range(len(plan))]
    for start, actions in blocks.items():
        assert len(actions) == 3  # 2 steps + the context pass, all with the same inputs
        hi = block_rows(start, N)[1]
        for a in actions:
            assert a.keyboard.shape == (1, hi, 4) and torch.equal(a.keyboard[0], kb[:hi])
            torch.testing.assert_close(a.mouse[0], mouse[:hi], atol=1e-7, rtol=0)
            torch.testing.assert_close(a.cond_concat, cond[:, :, start : start + N], atol=1e-5, rtol=1e-5)
    assert world.transformer.contexts and all(torch.equal(c, tokens) for c in world.transformer.contexts)
    assert [c.keys for c in session.control_log] == [("W",), ("W", "A"), ("S", "J"), ("S", "J")]
    # a tap between boundaries still counts; a prompt is ignored (no text), not an error
    session.control(keys=["D"])
    session.control(keys=[])
    session.switch_prompt("a castle")
    session.step()
    assert session.control_log[-1].keys == ("D",)


def test_opposite_mouse_gives_opposite_rows(vae, image):
    rows = []
    for yaw in (0.1, -0.1):
        world = make_world(vae)
        session = InteractiveSession(world, width=48, height=32, decode=False, start_image=image,
                                     clip_vision=torch.randn(1, 9, 32))  # fmt: skip
        session.control(mouse=(0.0, yaw))
        session.step()
        session.step()
        rows.append(world.transformer.calls[-1][1].mouse)
    assert torch.equal(rows[0], -rows[1]) and rows[0][0, :, 1].min() == pytest.approx(0.1)


def test_generate_video_with_a_schedule_feeds_the_same_rows(vae, image):
    world = make_world(vae, "gta_drive")
    schedule = ActionSchedule(((0.0, "W"), (1.5, "S D")))  # 1.5 s = block 2 at 16 fps (0.75 s per block)
    generate_video(world, "", num_blocks=3, width=48, height=32, decode=False, start_image=image,
                   clip_vision=torch.randn(1, 9, 32), actions=schedule)  # fmt: skip
    last = world.transformer.calls[-1][1]
    assert last.keyboard.shape == (1, 33, 2) and last.mouse.shape == (1, 33, 2)
    assert last.keyboard[0, :21].tolist() == [[1.0, 0.0]] * 21 and last.keyboard[0, 21:].tolist() == [[0.0, 1.0]] * 12
    assert last.mouse[0, 21:, 1].tolist() == pytest.approx([0.1] * 12) and last.mouse[0, :21].abs().sum() == 0


def test_models_without_image_input_refuse_one(image):
    world = tiny_world(action_names=("left", "right"))
    with pytest.raises(ConfigError, match="this model takes no image"):
        InteractiveSession(world, width=48, height=32, decode=False, start_image=image)
    with pytest.raises(ConfigError, match="this model takes no image"):
        generate_video(world, "", num_blocks=1, width=48, height=32, decode=False, start_image=image)


def test_image_model_needs_image_and_clip(vae, image):
    with pytest.raises(ConfigError, match="connect a start image"):
        InteractiveSession(make_world(vae), width=48, height=32, decode=False)
    with pytest.raises(ConfigError, match="clip_vision_h"):
        InteractiveSession(make_world(vae), width=48, height=32, decode=False, start_image=image)


def test_generate_video_reads_a_live_channel_at_each_boundary(vae, image):
    from inferix_core.controls import ControlChannel

    world = make_world(vae)
    channel = ControlChannel(CONTROL_SPECS["universal"])
    channel.put({"keys": ["W"]})
    model = world.transformer
    forward = model.forward

    def forward_and_press(x, timestep, text, cache, start, action=None):  # a key press arrives during block 1
        if start == N and not any(s == N for s, _ in model.calls):
            channel.put({"keys": ["D"]})
        return forward(x, timestep, text, cache, start, action)

    model.forward = forward_and_press
    generate_video(world, "", num_blocks=3, width=48, height=32, decode=False, start_image=image,
                   clip_vision=torch.randn(1, 9, 32), actions=channel)  # fmt: skip
    kb = model.calls[-1][1].keyboard[0]
    assert kb[:21].tolist() == [[1.0, 0.0, 0.0, 0.0]] * 21  # blocks 0 and 1: W
    assert kb[21:].tolist() == [[0.0, 0.0, 0.0, 1.0]] * 12  # block 2: D, pressed while block 1 ran
    assert all(torch.equal(a.keyboard, model.calls[i - i % 3][1].keyboard) for i, (_, a) in enumerate(model.calls))


def test_play_steers_an_image_model_over_http(vae, image, tmp_path):
    """`inferix play` on a keyboard/mouse model: control events posted to the live view reach the blocks."""
    import http.client
    import json
    import threading

    from inferix_core.commands.play import play

    world = make_world(vae)
    views, results, ready = [], [], threading.Event()
    gate = threading.Event()  # block 0 waits until the key is posted, so the test does not race the session
    forward = world.transformer.forward

    def forward_when_ready(*args, **kwargs):
        gate.wait(30)
        return forward(*args, **kwargs)

    world.transformer.forward = forward_when_ready

    def serve():
        results.append(play(world, width=48, height=32, port=0, output=None, max_blocks=2, start_image=image,
                            clip_vision=torch.randn(1, 9, 32), on_ready=lambda v: (views.append(v), ready.set())))  # fmt: skip

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert ready.wait(60)
        assert views[0].controls is CONTROL_SPECS["universal"] and views[0].key_actions == {}
        conn = http.client.HTTPConnection("127.0.0.1", views[0].port, timeout=10)
        conn.request(
            "POST", "/input", json.dumps({"type": "control", "keys": ["S"]}), {"Content-Type": "application/json"}
        )
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        gate.set()
        thread.join(60)
    assert not thread.is_alive() and results[0].num_blocks == 2
    # block 0 was already being generated (its rows were written before the POST); block 1 has S held
    assert results[0].action_log[1] == "S"
    last = world.transformer.calls[-1][1]
    assert last.keyboard[0, 9:].tolist() == [[0.0, 1.0, 0.0, 0.0]] * 12


def test_play_reads_the_start_image_and_clip_vision_of_a_matrix_game_workflow(tmp_path, monkeypatch):
    from pathlib import Path

    from inferix_core import cli
    from inferix_core.commands import play as play_cmd
    from inferix_core.errors import MissingFileError

    api = Path(__file__).resolve().parents[1] / "workflows" / "api" / "matrix_game2_universal_api.json"
    models, inputs = tmp_path / "models", tmp_path / "input"
    for rel in ("diffusion_models/base_distilled_model/base_distill.safetensors", "vae/Wan2.1_VAE.pth",
                "clip_vision/clip_vision_h.safetensors"):  # fmt: skip
        (models / rel).parent.mkdir(parents=True, exist_ok=True)
        (models / rel).touch()
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(models))
    loaded = {}
    monkeypatch.setattr(
        play_cmd, "load_world_model", lambda path, options: loaded.update(path=path, **vars(options)) or "wm"
    )
    with pytest.raises(MissingFileError, match="INFERIX_INPUT_DIR"):
        play_cmd.load_setup(cli.build_parser().parse_args(["play", str(api)]))
    inputs.mkdir()
    (inputs / "example.png").touch()
    monkeypatch.setenv("INFERIX_INPUT_DIR", str(inputs))
    setup = play_cmd.load_setup(cli.build_parser().parse_args(["play", str(api)]))
    assert loaded["path"].endswith("base_distilled_model/base_distill.safetensors")
    assert loaded["vae_path"].endswith("Wan2.1_VAE.pth")
    assert setup.start_image == str(inputs / "example.png")
    assert setup.clip_vision == str(models / "clip_vision" / "clip_vision_h.safetensors")
    assert (setup.width, setup.height) == (640, 352)
