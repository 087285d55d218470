"""Matrix-Game 2.0 end to end: a released-layout file, a start image, keyboard and mouse, frames out.

The two halves (the model core and the inputs around it) are tested on their own elsewhere; this checks
that they meet: `load_world_model` on a tiny file in the released key layout, `generate_video` with a
start image, CLIP tokens and an Action Schedule, and that the mouse steers: opposite yaw from the same
start moves the video in opposite directions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inferix_core.api import generate_video
from inferix_core.engine.schedules import ActionSchedule
from inferix_core.models.registry import load_world_model
from tests.fixture_utils import FIXTURES
from tests.models.test_matrix_game2_checkpoint import CLIP, released_state

W, H = 48, 32  # the tiny VAE's 8x: latents 6x4


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = tmp_path_factory.mktemp("mg2") / "model.safetensors"
    save_file({k: v.contiguous() for k, v in released_state(4, True, seed=2).items()}, str(path))
    return load_world_model(str(path), vae_path=str(FIXTURES / "wan_vae_tiny.safetensors"), device="cpu")


def _run(world, schedule: str, seed: int = 0):
    image = np.random.RandomState(5).randint(0, 256, (H, W, 3), dtype=np.uint8)
    tokens = torch.randn(1, 7, CLIP, generator=torch.Generator().manual_seed(9))
    entries = tuple((float(t), a.strip()) for t, a in (e.split("|") for e in schedule.split(";")))
    return generate_video(
        world, None, num_blocks=2, width=W, height=H, seed=seed, start_image=image, clip_vision=tokens,
        actions=ActionSchedule(entries),
    )  # fmt: skip


def test_image_start_with_keyboard_and_mouse_makes_frames(world):
    assert world.family == "matrix_game2" and world.variant == "universal"
    res = _run(world, "0 | W; 0.5 | W+A yaw=0.1")
    assert res.frames.shape == (1 + 4 * 5, H, W, 3)  # 2 blocks of 3 latent frames
    assert torch.isfinite(res.latents).all()


def test_opposite_mouse_turns_move_the_video_oppositely(world):
    base = _run(world, "0 | none").latents
    left = _run(world, "0 | none yaw=-0.1").latents - base
    right = _run(world, "0 | none yaw=0.1").latents - base
    assert left.abs().max() > 1e-3 and right.abs().max() > 1e-3  # the mouse reaches the model
    cos = torch.nn.functional.cosine_similarity(left.flatten(), right.flatten(), dim=0)
    assert cos < -0.5, cos


def test_keys_change_the_video_only_from_the_block_they_reach(world):
    # the key pressed from the second block on reaches it (and later), not block 0: rows 0..8 are block 0's
    a = _run(world, "0 | none").latents
    b = _run(world, "0 | none; 0.75 | W").latents
    assert torch.equal(a[:, :3], b[:, :3])
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-3
