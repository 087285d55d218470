"""web_ext/inferix_live.js in headless chromium: a keyboard/mouse run gets a Control button that steers it.

ComfyUI's `app` and `api` modules are replaced by small stand-ins (a node with a DOM widget, an event
target, a fetchApi that records what it is asked to POST); the extension itself is the shipped file.
Keys and the pointer-lock mouse move are real input events sent over the DevTools protocol.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from inferix_core.controls import CONTROL_SPECS
from tests.devtools_utils import devtools_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
EXT = Path(__file__).resolve().parents[2] / "web_ext" / "inferix_live.js"

APP = """
export const app = {
  graph: { _nodes: [], getNodeById(id) { return this._nodes.find((n) => n.id === id) ?? null; }, links: {} },
  registerExtension(ext) { window.ext = ext; ext.setup(); },
};
"""
API = """
class Api extends EventTarget {
  apiURL(path) { return path; }
  interrupt() {}
  fetchApi(route, options) { window.posts.push({ route, body: JSON.parse(options.body) }); return Promise.resolve({ ok: true }); }
}
window.posts = [];
export const api = new Api();
"""
PAGE = """<!doctype html><html><body style="margin:0"><script type="module">
import { app } from "/scripts/app.js";
import { api } from "/scripts/api.js";
import "/ext/inferix/inferix_live.js";
const node = { id: 7, comfyClass: "InferixBlockDenoise", inputs: [], size: [400, 160], graph: app.graph,
  addDOMWidget(name, type, el) { el.style.height = "120px"; document.body.append(el); return {}; },
  setDirtyCanvas() {}, computeSize() { return [400, 160]; }, setSize() {} };
app.graph._nodes.push(node);
window.ext.nodeCreated(node);
api.dispatchEvent(new CustomEvent("execution_start", { detail: { prompt_id: "p" } }));
api.dispatchEvent(new CustomEvent("inferix.controls", { detail: { node: "7", controls: CONTROLS } }));
api.dispatchEvent(new CustomEvent("inferix.block", { detail: { node: "7", run: "r", block: 0, num_blocks: 4,
  timings: { denoise_s: 0.1, decode_s: 0.05 } } }));
window.ready = true;
</script></body></html>"""


def _cdp(ws, method: str, **params):
    _cdp.n = getattr(_cdp, "n", 0) + 1
    ws.send(json.dumps({"id": _cdp.n, "method": method, "params": params}))
    while True:
        reply = json.loads(ws.recv())
        if reply.get("id") == _cdp.n:
            return reply.get("result", {})


def _eval(ws, expression: str):
    return _cdp(ws, "Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed (apt-get install chromium)")
def test_control_button_sends_keys_and_mouse_look(tmp_path):
    websocket = pytest.importorskip("websocket")
    site = tmp_path / "site"
    (site / "scripts").mkdir(parents=True)
    (site / "ext" / "inferix").mkdir(parents=True)
    (site / "scripts" / "app.js").write_text(APP)
    (site / "scripts" / "api.js").write_text(API)
    shutil.copy(EXT, site / "ext" / "inferix" / "inferix_live.js")
    controls = CONTROL_SPECS["universal"].page_config()
    (site / "index.html").write_text(PAGE.replace("CONTROLS", json.dumps(controls)))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=800,600", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port = devtools_port(proc, tmp_path / "profile")
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5).read())
        page = next(t for t in targets if t["type"] == "page")
        # no Origin header: Chromium ≥ 111 refuses DevTools sockets from an origin it was not told to allow
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True)
        _cdp(ws, "Page.navigate", url=f"http://127.0.0.1:{server.server_address[1]}/index.html")
        for _ in range(50):
            if _eval(ws, "window.ready === true"):
                break
            time.sleep(0.1)
        assert _eval(ws, "getComputedStyle(document.querySelector('.inferix-control')).display") != "none"
        rect = json.loads(
            _eval(ws, "JSON.stringify(document.querySelector('.inferix-control').getBoundingClientRect())")
        )
        x, y = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
        for kind in ("mousePressed", "mouseReleased"):
            _cdp(ws, "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        time.sleep(0.3)
        assert _eval(ws, "document.pointerLockElement === document.querySelector('.inferix-live')")
        for kind, key in (("keyDown", "w"), ("keyDown", "d"), ("keyUp", "w")):
            _cdp(ws, "Input.dispatchKeyEvent", type=kind, key=key, code=f"Key{key.upper()}")
        for dx, dy in ((30, 0), (30, -20)):
            x, y = x + dx, y + dy
            _cdp(ws, "Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="none")
        time.sleep(0.3)
        _cdp(ws, "Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape")
        time.sleep(0.2)
        posts = _eval(ws, "JSON.stringify(window.posts)")
        steering = _eval(ws, "window.ext.state.steering === null")
        ws.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.shutdown()
    posts = json.loads(posts)
    assert {p["route"] for p in posts} == {"/inferix/control"} and {p["body"]["node"] for p in posts} == {"7"}
    events = [e for p in posts for e in p["body"]["events"]]
    keys = [e["keys"] for e in events if "keys" in e]
    assert keys[:3] == [["W"], ["W", "D"], ["D"]] and keys[-1] == []  # Esc releases the held keys
    looks = [e["look"] for e in events if "look" in e]
    assert sum(dx for dx, _ in looks) == 60 and sum(dy for _, dy in looks) == -20
    assert steering
