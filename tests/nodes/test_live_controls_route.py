"""POST /inferix/control (ComfyUI's page → a running Block Denoise): parsing, bounds and the run's channel."""

from __future__ import annotations

import json

from inferix_nodes import live_controls

from inferix_core.controls import CONTROL_SPECS


def body(node, events) -> bytes:
    return json.dumps({"node": node, "events": events}).encode()


def test_events_reach_the_running_node_and_bad_ones_are_refused():
    spec = CONTROL_SPECS["gta_drive"]
    assert live_controls.handle(body("7", [{"type": "control", "keys": ["W"]}]))[0] == 404  # nothing runs
    with live_controls.open_channel("7", spec) as channel:
        assert live_controls.handle(body("7", [{"type": "control", "keys": ["w", "D"]},
                                               {"type": "control", "look": [30, 5]}])) == (200, {"accepted": 2})  # fmt: skip
        status, reply = live_controls.handle(body("7", [{"type": "control", "keys": ["W"]},
                                                        {"type": "control", "keys": ["J"]}]))  # fmt: skip
        assert status == 400 and "not a gta_drive control" in reply["error"]
        assert live_controls.handle(body("7", [{"type": "prompt", "text": "x"}]))[0] == 400
        assert live_controls.handle(b"{not json")[0] == 400
        assert live_controls.handle(b" " * (live_controls.MAX_BODY_BYTES + 1))[0] == 413
        assert live_controls.handle(body("7", [{"type": "control", "keys": []}] * 65))[0] == 400
        control, extra = channel.take_block(12)
        assert control.keys == ("W", "D") and extra == (0.0, 30 * spec.look_sensitivity / 12)  # no pitch for GTA
        channel.max_events = 1
        assert live_controls.handle(body("7", [{"type": "control", "keys": ["S"]}] * 2))[0] == 429
    assert live_controls.handle(body("7", [{"type": "control", "keys": ["W"]}]))[0] == 404  # closed with the run
    assert live_controls.register_route() is False  # headless: no ComfyUI server to add it to
