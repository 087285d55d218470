"""Keyboard/mouse `control` events on the live view: parsing at the endpoint, the page's config, a real browser.

The browser test drives the page through the Chrome DevTools protocol (key presses, a click that takes the
pointer lock, relative mouse moves) and checks the control events the server queued. Skipped without
chromium or websocket-client.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from inferix_core.controls import CONTROL_SPECS
from inferix_core.errors import ConfigError
from inferix_core.sinks.live import InputQueue, LiveView
from tests.devtools_utils import devtools_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def post(view: LiveView, payload: object) -> tuple[int, dict]:
    request = urllib.request.Request(
        view.url + "input", data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_control_events_are_parsed_and_queued_in_order():
    with LiveView(key_actions={}, controls=CONTROL_SPECS["universal"]) as view:
        assert post(view, {"type": "control", "keys": ["w", "A"]})[0] == 200
        assert post(view, [{"type": "control", "look": [12, -3]}, {"type": "control", "keys": []}])[0] == 200
        status, body = post(view, {"type": "control", "keys": ["X"]})
        assert status == 400 and "not a universal control" in body["error"]
        status, body = post(view, {"type": "control", "look": [float("inf"), 0]})
        assert status == 400
        status, body = post(view, {"type": "control"})
        assert status == 400 and "needs 'keys'" in body["error"]
        events = view.inputs.drain()
    assert [{k: v for k, v in e.items() if k not in ("seq", "time_s")} for e in events] == [
        {"type": "control", "keys": ["W", "A"]},
        {"type": "control", "look": [12.0, -3.0]},
        {"type": "control", "keys": []},
    ]


def test_models_without_controls_refuse_control_events_and_the_page_knows():
    queue = InputQueue({"left"})
    with pytest.raises(ConfigError, match="takes no keyboard/mouse controls"):
        queue.put({"type": "control", "keys": ["W"]})
    view = LiveView(controls=CONTROL_SPECS["gta_drive"])
    config = json.loads(view.page().split("const CONFIG = ", 1)[1].split(";\n", 1)[0])
    assert config["controls"]["keys"] == {"W": "forward", "S": "back"}
    assert config["controls"]["camera_keys"] == ["A", "D"] and config["controls"]["look_pitch"] is False
    assert json.loads(LiveView().page().split("const CONFIG = ", 1)[1].split(";\n", 1)[0])["controls"] is None


def _cdp(ws, method: str, **params):
    _cdp.n = getattr(_cdp, "n", 0) + 1
    ws.send(json.dumps({"id": _cdp.n, "method": method, "params": params}))
    while True:
        reply = json.loads(ws.recv())
        if reply.get("id") == _cdp.n:
            return reply.get("result", {})


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed (apt-get install chromium)")
def test_page_sends_held_keys_and_pointer_lock_mouse_look(tmp_path):
    websocket = pytest.importorskip("websocket")
    with LiveView(key_actions={}, controls=CONTROL_SPECS["universal"]) as view:
        proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={tmp_path}", "--window-size=1100,640", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            port = devtools_port(proc, tmp_path)
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5).read())
            page = next(t for t in targets if t["type"] == "page")
            ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=10, suppress_origin=True)
            _cdp(ws, "Page.enable")
            _cdp(ws, "Page.navigate", url=view.url)
            time.sleep(1.0)
            for kind, key, code in (("keyDown", "w", "KeyW"), ("keyDown", "a", "KeyA"), ("keyUp", "w", "KeyW")):
                _cdp(ws, "Input.dispatchKeyEvent", type=kind, key=key, code=code, text=key if kind == "keyDown" else "")
            box = _cdp(ws, "Runtime.evaluate", expression="JSON.stringify(document.getElementById('video')"
                       ".getBoundingClientRect())", returnByValue=True)  # fmt: skip
            rect = json.loads(box["result"]["value"])
            cx, cy = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
            for kind in ("mousePressed", "mouseReleased"):
                _cdp(ws, "Input.dispatchMouseEvent", type=kind, x=cx, y=cy, button="left", clickCount=1)
            time.sleep(0.3)
            locked = _cdp(ws, "Runtime.evaluate", expression="document.pointerLockElement === "
                          "document.getElementById('video')", returnByValue=True)["result"]["value"]  # fmt: skip
            for dx in (40, 40):
                _cdp(ws, "Input.dispatchMouseEvent", type="mouseMoved", x=cx + dx, y=cy - 10, button="none")
                cx, cy = cx + dx, cy - 10
            time.sleep(0.5)
            ws.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        events = [e for e in view.inputs.drain() if e["type"] == "control"]
    keys = [e["keys"] for e in events if "keys" in e]
    assert keys == [["W"], ["W", "A"], ["A"]]
    assert locked, "the click on the video did not take the pointer lock"
    looks = [e["look"] for e in events if "look" in e]
    assert looks and sum(dx for dx, _ in looks) == 80 and sum(dy for _, dy in looks) == -20  # right and up
