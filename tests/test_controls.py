"""Keyboard/mouse action rows per pixel frame (Matrix-Game 2.0): block rows, key layouts, schedules, live state.

The closed form of a block's rows is the authors' `cond_current(..., replace=...)` (pipeline/causal_inference.py
of Matrix-Game-2 at 3ceb3114), restated here: for a block at latent frame s with n frames, final =
1 + 4·(s + n − 1), new = 1 + 4·(n − 1) rows for s = 0 else 4·n, rows [final − new, final) get the state.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.controls import (
    CONTROL_SPECS,
    ActionTrack,
    Control,
    LiveControls,
    block_rows,
    control_row,
    parse_control,
    validate_control_event,
)
from inferix_core.engine.schedules import ActionSchedule, BlockTiming
from inferix_core.errors import ConfigError


def reference_fill(rows: torch.Tensor, start: int, n: int, value: torch.Tensor) -> None:
    """The authors' streaming write, as written in cond_current."""
    new = 1 + 4 * (n - 1) if start == 0 else 4 * n
    final = 1 + 4 * (start + n - 1)
    rows[final - new : final] = value


@pytest.mark.parametrize("n", [1, 3, 4])
def test_block_rows_tile_the_track_like_the_streaming_demo(n):
    total = 1 + 4 * (5 * n - 1)
    expected = torch.full((total,), -1.0)
    got = torch.full((total,), -1.0)
    for b in range(5):
        reference_fill(expected, b * n, n, torch.tensor(float(b)))
        lo, hi = block_rows(b * n, n)
        got[lo:hi] = float(b)
    assert torch.equal(got, expected) and (got >= 0).all()
    assert block_rows(0, 3) == (0, 9) and block_rows(3, 3) == (9, 21)  # README_matrix_game2 §4.2: 9, 21, 33, 45


def test_key_layouts_follow_the_authors_demo():
    u, g, t = CONTROL_SPECS["universal"], CONTROL_SPECS["gta_drive"], CONTROL_SPECS["templerun"]
    kb, mouse = control_row(u, Control(("W", "A"), (0.0, 0.0)))
    assert kb.tolist() == [1, 0, 1, 0] and mouse.tolist() == [0, 0]  # forward_left of Bench_actions_universal
    _, mouse = control_row(u, Control(("L",)))
    assert mouse.tolist() == pytest.approx([0.0, 0.1])  # camera_r
    _, mouse = control_row(u, Control(("I",)))
    assert mouse.tolist() == pytest.approx([0.1, 0.0])  # camera_up
    kb, mouse = control_row(g, Control(("S", "A")))
    assert kb.tolist() == [0, 1] and mouse.tolist() == pytest.approx([0.0, -0.1])  # gta: A steers by yaw
    kb, mouse = control_row(t, Control(("Z",)))
    assert kb.tolist() == [0, 0, 0, 1, 0, 0, 0] and mouse is None  # turnleft is channel 3
    kb, _ = control_row(t, Control(()))
    assert kb.tolist() == [1, 0, 0, 0, 0, 0, 0]  # nomove when nothing is held
    _, mouse = control_row(u, Control(("L",), (0.0, 0.5)))
    assert mouse.tolist() == pytest.approx([0.0, u.mouse_limit])  # clamped


def test_parse_control_values():
    u = CONTROL_SPECS["universal"]
    assert parse_control(u, "W+A yaw=0.1") == Control(("W", "A"), (0.0, 0.1))
    assert parse_control(u, "forward, right pitch = -0.05") == Control(("W", "D"), (-0.05, 0.0))
    assert parse_control(u, "none") == Control((), (0.0, 0.0))
    with pytest.raises(ConfigError, match="not a universal control"):
        parse_control(u, "jump")
    with pytest.raises(ConfigError, match="takes no mouse"):
        parse_control(CONTROL_SPECS["templerun"], "W yaw=0.1")
    with pytest.raises(ConfigError, match="finite"):
        parse_control(u, "W yaw=nan")


def test_schedule_rows_match_the_closed_form():
    spec = CONTROL_SPECS["universal"]
    schedule = ActionSchedule(((0.0, "W"), (1.5, "W+D yaw=0.05"), (2.2, "none pitch=-0.1")))
    n, num_blocks = 3, 5
    timing = BlockTiming(block_frames=n, temporal_compression=4, fps=16)  # blocks start at frames 0, 9, 21, 33, 45
    track = schedule.action_track(spec, num_blocks, n, timing)
    total = 1 + 4 * (num_blocks * n - 1)
    kb = torch.full((total, 4), float("nan"))
    mouse = torch.full((total, 2), float("nan"))
    # entries start at the nearest block start: 0 s → block 0, 1.5 s (frame 24) → block 2 (21), 2.2 s (35.2) → block 3 (33)
    values = [([1, 0, 0, 0], [0, 0])] * 2 + [([1, 0, 0, 1], [0, 0.05])] + [([0, 0, 0, 0], [-0.1, 0])] * 2
    for b, (k, m) in enumerate(values):
        reference_fill(kb, b * n, n, torch.tensor(k, dtype=torch.float32))
        reference_fill(mouse, b * n, n, torch.tensor(m, dtype=torch.float32))
    rows = track.rows()
    assert rows.keyboard.shape == (1, total, 4) and torch.equal(rows.keyboard[0], kb)
    assert torch.equal(rows.mouse[0], mouse)
    block2 = track.for_block(2 * n, n)
    assert block2.num_rows == 1 + 4 * (3 * n - 1) and torch.equal(block2.mouse[0], mouse[: block2.num_rows])


def test_track_refuses_out_of_order_blocks_and_bad_rows():
    track = ActionTrack(CONTROL_SPECS["gta_drive"])
    with pytest.raises(ConfigError, match="write blocks in order"):
        track.write_block(3, 3, Control(("W",)))
    with pytest.raises(ConfigError, match="needs mouse"):
        track.set_rows(torch.zeros(5, 2))
    track.set_rows(torch.zeros(9, 2), torch.randn(9, 2))
    track.write_block(3, 3, Control(("W",)))
    assert len(track) == 21 and track.rows().keyboard[0, 9:].tolist() == [[1.0, 0.0]] * 12


def test_live_controls_count_taps_and_spread_pointer_movement():
    spec = CONTROL_SPECS["universal"]
    live = LiveControls(spec)
    live.apply({"keys": ["W"]})
    live.apply({"keys": []})  # a tap shorter than a block
    live.apply({"look": [100.0, 0.0]})
    live.apply({"look": [50.0, -25.0]})
    control, extra = live.take_block(12)
    assert control.keys == ("W",)
    assert extra == pytest.approx((25 * spec.look_sensitivity / 12, 150 * spec.look_sensitivity / 12))
    control, extra = live.take_block(12)  # the next block: the tap is over, the pointer did not move
    assert control.keys == () and extra == (0.0, 0.0)
    live.apply({"keys": ["w", "a"], "mouse": [0.0, -0.1]})
    control, _ = live.take_block(12)
    assert control == Control(("W", "A"), (0.0, -0.1))
    gta = LiveControls(CONTROL_SPECS["gta_drive"])
    gta.apply({"look": [0.0, -300.0]})
    assert gta.take_block(12)[1] == (0.0, 0.0)  # GTA-drive ignores pitch from the pointer
    temple = LiveControls(CONTROL_SPECS["templerun"])
    temple.apply({"keys": ["W"]})
    temple.apply({"keys": ["W", "Z"]})
    assert temple.take_block(12)[0].keys == ("Z",)  # one-hot: the last key pressed


def test_control_events_are_validated():
    spec = CONTROL_SPECS["universal"]
    assert validate_control_event({"keys": ["w"], "look": [3, -2]}, spec) == {"keys": ["W"], "look": [3.0, -2.0]}
    for bad in ({}, {"keys": "W"}, {"keys": ["X"]}, {"look": [1e9, 0]}, {"mouse": [0, float("inf")]}, {"mouse": [1]}):
        with pytest.raises(ConfigError):
            validate_control_event(bad, spec)
    with pytest.raises(ConfigError, match="takes no mouse"):
        validate_control_event({"look": [1, 0]}, CONTROL_SPECS["templerun"])
    with pytest.raises(ConfigError, match="takes no keyboard/mouse"):
        validate_control_event({"keys": ["W"]}, None)
