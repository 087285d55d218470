"""Matrix-Game 2.0 worlds resumed through `generate_video` and `InteractiveSession` (start image + keys/mouse).

The action track is the caller's: a saved world keeps the rows its blocks read, and the caller gives the start
image again and the rest of the track. A world saved after k blocks and continued equals never stopping,
bitwise (CPU fp32, a tiny random Matrix-Game model in the released layout): a session's 3 blocks equal 1 block,
a save, a new session and 2 more; a generation continued in one call equals it continued in two calls through a
file. A resume with another start image, CLIP tokens, model or cache settings is refused with one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from inferix_core.api import generate_video
from inferix_core.cache import KVCacheConfig
from inferix_core.clients.session import InteractiveSession
from inferix_core.controls import block_rows
from inferix_core.engine.world_state import WorldState, read_world_state, write_world_state
from inferix_core.errors import ConfigError
from inferix_core.models.registry import load_world_model
from tests.fixture_utils import FIXTURES
from tests.models.test_matrix_game2_checkpoint import CLIP, released_state

W, H = 48, 32  # the tiny VAE's 8x: latents 6x4


def _world(tmp_path_factory, seed: int):
    path = tmp_path_factory.mktemp("mg2") / "model.safetensors"
    save_file({k: v.contiguous() for k, v in released_state(4, True, seed=seed).items()}, str(path))
    return load_world_model(str(path), vae_path=str(FIXTURES / "wan_vae_tiny.safetensors"), device="cpu")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _world(tmp_path_factory, 2)


def _image(seed=5):
    return np.random.RandomState(seed).randint(0, 256, (H, W, 3), dtype=np.uint8)


def _tokens(seed=9):
    return torch.randn(1, 7, CLIP, generator=torch.Generator().manual_seed(seed))


def _rows(world, num_blocks: int, seed=11):
    """Random keyboard (0/1) and mouse rows for `num_blocks` blocks from frame 0."""
    n = world.sampling.block_frames
    total = block_rows((num_blocks - 1) * n, n)[1]
    g = torch.Generator().manual_seed(seed)
    keyboard = (torch.rand(total, 4, generator=g) > 0.5).float()
    mouse = 0.2 * torch.randn(total, 2, generator=g)
    return keyboard, mouse


def _split(world, rows, first_block: int, num_blocks: int):
    """The rows that blocks [first_block, first_block + num_blocks) add to the track."""
    n = world.sampling.block_frames
    lo = block_rows(first_block * n, n)[0]
    hi = block_rows((first_block + num_blocks - 1) * n, n)[1]
    return {"keyboard": rows[0][lo:hi], "mouse": rows[1][lo:hi]}


def _gen(world, blocks, actions, state=None, image=None, tokens=None, cache=None):
    return generate_video(
        world, None, num_blocks=blocks, width=W, height=H, seed=3, start_image=_image() if image is None else image,
        clip_vision=_tokens() if tokens is None else tokens, actions=actions, world_state=state, keep_world_state=True,
        cache=cache,
    )  # fmt: skip


@pytest.mark.slow  # 15-40 s on the shared 2-core machine (five generations with decoding)
def test_generation_continues_a_saved_world_in_one_or_two_calls(world, tmp_path):
    rows = _rows(world, 3)
    first = _gen(world, 1, _split(world, rows, 0, 1))
    hdr = first.world_state.header["extra"]["image_world"]
    assert hdr["rows"] == block_rows(0, world.sampling.block_frames)[1]
    once = _gen(world, 2, _split(world, rows, 1, 2), first.world_state)
    path = write_world_state(tmp_path / "w.safetensors", first.world_state)
    a = _gen(world, 1, _split(world, rows, 1, 1), read_world_state(path))
    b = _gen(world, 1, _split(world, rows, 2, 1), a.world_state)
    assert torch.isfinite(once.latents).all()
    assert torch.equal(once.latents, torch.cat([a.latents, b.latents], dim=1))
    assert np.array_equal(once.frames, np.concatenate([a.frames, b.frames]))
    assert b.world_state.next_block == 3
    # the saved rows are what the resumed blocks read: other past rows (same cache) give another video
    tampered = dict(first.world_state.tensors)
    tampered["extra.image_world.mouse"] = -tampered["extra.image_world.mouse"] + 0.3
    other = _gen(world, 1, _split(world, rows, 1, 1), WorldState(first.world_state.header, tampered))
    assert not torch.equal(other.latents, a.latents)


def _session(world, state=None, image=None, tokens=None):
    return InteractiveSession(world, width=W, height=H, seed=4, start_image=_image() if image is None else image,
                              clip_vision=_tokens() if tokens is None else tokens, world_state=state)  # fmt: skip


CONTROLS = [(("W",), (0.0, 0.1)), (("A", "W"), (0.05, -0.1)), ((), (0.0, 0.0))]


def _steps(session, controls):
    out = []
    for keys, mouse in controls:
        session.control(keys=keys, mouse=mouse)
        out.append(session.step())
    return out


def test_a_session_saved_and_resumed_equals_never_stopping(world, tmp_path):
    with _session(world) as s:
        whole = _steps(s, CONTROLS)
    with _session(world) as s:
        part = _steps(s, CONTROLS[:1])
        path = s.save_world(tmp_path / "w.safetensors")
    with _session(world, read_world_state(path)) as s:
        assert s.state.next_block == 1
        rest = _steps(s, CONTROLS[1:])
    got = part + rest
    assert all(torch.isfinite(b.latents).all() for b in got)
    for x, y in zip(whole, got, strict=True):
        assert torch.equal(x.latents, y.latents)
        assert np.array_equal(x.frames, y.frames)


def test_a_resume_with_another_image_tokens_model_or_cache_is_refused(world, tmp_path_factory):
    rows = _rows(world, 2)
    state = _gen(world, 1, _split(world, rows, 0, 1)).world_state
    rest = _split(world, rows, 1, 1)
    with pytest.raises(ConfigError, match="another start image"):
        _gen(world, 1, rest, state, image=_image(6))
    with pytest.raises(ConfigError, match="other CLIP vision tokens"):
        _gen(world, 1, rest, state, tokens=_tokens(10))
    with pytest.raises(ConfigError, match="another model weights"):
        _gen(_world(tmp_path_factory, 3), 1, rest, state)
    with pytest.raises(ConfigError, match="KV cache settings"):
        _gen(world, 1, rest, state, cache=KVCacheConfig(window_frames=world.default_cache.window_frames + 3))
    with pytest.raises(ConfigError, match="another start image"):
        _session(world, state, image=_image(6))
    with pytest.raises(ConfigError, match=r"action rows \(4 per latent frame after block 1\); got 6"):
        _gen(world, 1, {"keyboard": rest["keyboard"][:6], "mouse": rest["mouse"][:6]}, state)
    bare = WorldState({**state.header, "extra": {}}, state.tensors)  # saved at the stream level: no track
    with pytest.raises(ConfigError, match="no Matrix-Game action track"):
        _gen(world, 1, rest, bare)
