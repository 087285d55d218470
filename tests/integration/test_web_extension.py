"""The front-end extension (web_ext/) in headless Chromium against the real ComfyUI of conftest.py.

The page loads the quickstart template (example_workflows/Inferix Quickstart*.json) through `app.loadGraphData`, queues it with `app.queuePrompt`
(400 blocks, the long version, with a fresh seed so nothing is cached), and we check what the extension
rendered from the `inferix.block` events: the live preview <img> in Stream Out (a new src per block),
the timing/KV-cache panel, the Interrupt button, which must stop the prompt. Screenshots go to a temp
dir, or to docs/images/ with INFERIX_UPDATE_DOC_IMAGES=1. Skipped without COMFYUI_DIR/COMFYUI_PYTHON
(conftest), without a Chromium (INFERIX_CHROMIUM, else chromium / chromium-browser / google-chrome on
PATH) or without websocket-client. The browser is driven over the DevTools protocol and always stopped.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.devtools_utils import devtools_port

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_UI = next((REPO / "example_workflows").glob("Inferix Quickstart*.json"))
BUNDLED_MODEL = REPO / "inferix_core" / "assets" / "bundled" / "transformer.safetensors"
DOC_IMAGES = REPO / "docs" / "images"
WIDTH, HEIGHT = 1600, 1000
MAX_PNG_BYTES = 400 * 1024
EXT = "app.extensions.find((e) => e.name === 'inferix.live')"
# Settings of the test server's default user: no template dialog, minimap or update toasts over the graph.
UI_SETTINGS = {
    "Comfy.TutorialCompleted": True,
    "Comfy.Minimap.Visible": False,
    "Comfy.Notification.ShowVersionUpdates": False,
}


def _chromium() -> str | None:
    for name in (os.environ.get("INFERIX_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


class Browser:
    """Headless Chromium with one page, driven over the Chrome DevTools Protocol (websocket-client)."""

    def __init__(self, executable: str, width: int = WIDTH, height: int = HEIGHT):
        import websocket

        self.profile = tempfile.mkdtemp(prefix="inferix_chromium_")
        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.events: list[dict] = []
        self._id = 0
        self.ws = None
        try:
            port = devtools_port(self.process, Path(self.profile))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as resp:
                page = next(t for t in json.loads(resp.read()) if t["type"] == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
            for domain in ("Runtime", "Log", "Page"):
                self.send(f"{domain}.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    def send(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def eval(self, expression: str):
        """Evaluate JS in the page (promises awaited); the JSON value of the result."""
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.console_text()}")
            time.sleep(0.25)

    def console(self) -> list[tuple[str, str]]:
        """(level, text) of console calls, log entries and uncaught exceptions, in order."""
        out = []
        for event in self.events:
            params = event["params"]
            if event["method"] == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                url = " ".join(f.get("url", "") for f in params.get("stackTrace", {}).get("callFrames", [])[:3])
                out.append((params["type"], f"{text} {url}"))
            elif event["method"] == "Log.entryAdded":
                entry = params["entry"]
                out.append((entry["level"], f"{entry['text']} {entry.get('url', '')}"))
            elif event["method"] == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text", "")
                url = " ".join(f.get("url", "") for f in details.get("stackTrace", {}).get("callFrames", []))
                out.append(("exception", f"{text} {details.get('url', '')} {url}"))
        return out

    def console_text(self) -> str:
        return "\n".join(f"[{level}] {text}" for level, text in self.console()[-40:])

    def screenshot(self, path: Path) -> Path:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        if len(data) > MAX_PNG_BYTES:  # keep committed images small: 256-colour palette
            from PIL import Image

            buf = io.BytesIO()
            Image.open(io.BytesIO(data)).convert("RGB").quantize(256).save(buf, format="PNG", optimize=True)
            data = buf.getvalue()
        path.write_bytes(data)
        return path

    def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                self.ws.close()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser():
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium (set INFERIX_CHROMIUM or put chromium on PATH) for the browser test")
    pytest.importorskip("websocket", reason="the browser test drives Chromium with websocket-client")
    b = Browser(executable)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def image_dir(tmp_path) -> Path:
    return DOC_IMAGES if os.environ.get("INFERIX_UPDATE_DOC_IMAGES") == "1" else tmp_path


def _fit_view(browser: Browser) -> None:
    """Zoom and pan so every node fills the canvas area between the side bar, top bar and bottom toolbar."""
    browser.eval("""(() => {
      const canvas = app.canvas, ds = canvas.ds;
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const node of app.graph.nodes) {
        const [x, y, w, h] = node.boundingRect;
        x0 = Math.min(x0, x - 40); y0 = Math.min(y0, y - 20); x1 = Math.max(x1, x + w + 40); y1 = Math.max(y1, y + h);
      }
      const rect = canvas.canvas.getBoundingClientRect();
      const left = 90 - rect.left, top = 100 - rect.top, right = rect.width - 30, bottom = rect.height - 80;
      const scale = Math.min((right - left) / (x1 - x0), (bottom - top) / (y1 - y0), 1.5);
      ds.scale = scale;
      ds.offset[0] = (left + (right - left - (x1 - x0) * scale) / 2) / scale - x0;
      ds.offset[1] = (top + (bottom - top - (y1 - y0) * scale) / 2) / scale - y0;
      canvas.setDirty(true, true);
    })()""")
    browser.eval("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    time.sleep(0.5)


def _panel(browser: Browser, class_type: str) -> dict:
    return browser.eval(_panel_js(class_type))


def _panel_js(class_type: str) -> str:
    """A JS expression giving the node's live-panel state (null without a panel)."""
    return f"""(() => {{
      const node = app.graph.nodes.find((n) => n.comfyClass === {json.dumps(class_type)});
      const live = node?.inferixLive;
      if (!live) return null;
      return {{
        connected: live.root.isConnected, visible: live.root.offsetParent !== null,
        status: live.status.textContent, block: live.block.textContent,
        timing: live.timing.textContent, memory: live.memory.textContent, bars: live.bars.children.length,
        button: live.button.style.display !== 'none' && live.root.contains(live.button),
        buttonEnabled: !live.button.disabled,
        img: live.withPreview ? {{src: live.img.src, shown: live.img.style.display !== 'none',
                                 loaded: live.img.complete && live.img.naturalWidth > 0}} : null,
      }};
    }})()"""


@pytest.mark.skipif(not BUNDLED_MODEL.is_file(), reason=f"the quickstart needs the bundled model ({BUNDLED_MODEL})")
def test_live_preview_panel_and_interrupt_in_the_browser(comfyui, browser, image_dir):
    status, _ = comfyui.post_json("/settings", UI_SETTINGS)
    assert status == 200
    browser.send("Page.navigate", url=comfyui.url + "/")
    browser.wait_for(
        f"!!(window.app?.graph && window.comfyAPI?.api?.api && {EXT})",
        180,
        "the ComfyUI page with the inferix.live extension",
    )

    # 1. the quickstart workflow in the graph
    workflow = json.loads(QUICKSTART_UI.read_text())
    browser.eval(f"app.loadGraphData({json.dumps(workflow)}, true, true, 'quickstart')")
    classes = browser.wait_for(
        "app.graph.nodes.length && app.graph.nodes.map((n) => n.comfyClass)", 30, "the loaded quickstart nodes"
    )
    assert sorted(classes) == sorted(n["type"] for n in workflow["nodes"])
    assert _panel(browser, "InferixBlockDenoise")["block"] == "no blocks yet"
    _fit_view(browser)
    shot = browser.screenshot(image_dir / "quickstart_workflow.png")
    assert 0 < shot.stat().st_size < MAX_PNG_BYTES

    # 2. queue the long version (400 blocks) with a fresh seed, record the Stream Out preview per block
    browser.eval("""(() => {
      const denoise = app.graph.nodes.find((n) => n.comfyClass === 'InferixBlockDenoise');
      denoise.widgets.find((w) => w.name === 'num_blocks').value = 400;
      denoise.widgets.find((w) => w.name === 'seed').value = Math.floor(Math.random() * 1e9);
      const out = app.graph.nodes.find((n) => n.comfyClass === 'InferixStreamOut');
      window.__inferixTest = {srcs: [], interrupted: false};
      // registered after the extension's listener, so it sees what the extension just rendered
      window.comfyAPI.api.api.addEventListener('inferix.block', () => window.__inferixTest.srcs.push(out.inferixLive?.img.src));
      window.comfyAPI.api.api.addEventListener('execution_interrupted', () => { window.__inferixTest.interrupted = true; });
    })()""")
    browser.eval("app.queuePrompt(0)")
    browser.wait_for(f"{EXT}.state.events >= 6", 300, "six inferix.block events")
    browser.wait_for(
        "(() => { const i = app.graph.nodes.find((n) => n.comfyClass === 'InferixStreamOut')"
        ".inferixLive.img; return i.complete && i.naturalWidth > 0; })()",
        30,
        "the preview image",
    )
    _fit_view(browser)  # the live nodes grew when the first block arrived
    state = browser.eval(
        f"(() => {{ const s = {EXT}.state; return {{events: s.events, running: s.running, last: s.lastEvent}}; }})()"
    )
    assert state["running"] and state["last"]["num_blocks"] == 400

    source = _panel(browser, "InferixBlockDenoise")
    # the stream goes on, so the preview may be between two blocks' images: read it once one has loaded
    out = browser.wait_for(
        f"(() => {{ const p = {_panel_js('InferixStreamOut')}; return p?.img?.loaded ? p : null; }})()",
        30,
        "the Stream Out panel with its preview loaded",
    )
    for panel in (source, out):
        assert panel["connected"] and panel["visible"], panel
        assert panel["status"] == "live" and panel["button"] and panel["buttonEnabled"], panel
        assert panel["block"].startswith("block ") and panel["block"].endswith("/400"), panel
        assert " ms" in panel["timing"] and "denoise" in panel["timing"] and "avg" in panel["timing"], panel
        assert panel["memory"].startswith("KV cache ") and "iB" in panel["memory"], panel
        assert panel["bars"] >= 6, panel
    assert source["img"] is None  # the generating node shows ComfyUI's own progress preview
    assert out["img"]["shown"] and out["img"]["loaded"] and "/view?" in out["img"]["src"], out
    srcs = browser.eval("window.__inferixTest.srcs")
    assert len(srcs) >= 6 and len(set(srcs)) == len(srcs), srcs  # a new preview URL per block
    shot = browser.screenshot(image_dir / "comfyui_live_preview.png")
    assert 0 < shot.stat().st_size < MAX_PNG_BYTES

    # 3. the panel's Interrupt button stops the prompt (POST /interrupt)
    browser.eval("app.graph.nodes.find((n) => n.comfyClass === 'InferixStreamOut').inferixLive.button.click()")
    browser.wait_for(f"window.__inferixTest.interrupted && !{EXT}.state.running", 120, "execution_interrupted")
    out = _panel(browser, "InferixStreamOut")
    assert out["status"] == "interrupted" and not out["button"], out
    blocks = browser.eval(f"{EXT}.state.events")
    assert blocks < 400, blocks
    deadline = time.monotonic() + 60
    while comfyui.get_json("/queue")["queue_running"]:
        assert time.monotonic() < deadline, "the prompt is still running after Interrupt"
        time.sleep(0.5)

    # 4. nothing from our extension in the browser's errors (the front end's own 404s etc. are not ours)
    ours = [
        (level, text)
        for level, text in browser.console()
        if level in ("error", "exception") and ("inferix" in text.lower() or "extensions/ComfyUI-Inferix" in text)
    ]
    assert not ours, ours
