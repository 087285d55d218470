"""LiveView over real loopback HTTP: page, MJPEG frames, SSE timings, ordered input, clean stop, screenshot."""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inferix_core.errors import ConfigError
from inferix_core.sinks.live import InputQueue, LiveView

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]


def solid_block(rng: np.random.Generator, frames: int = 3) -> tuple[np.ndarray, np.ndarray]:
    colour = rng.integers(30, 226, size=3).astype(np.uint8)
    noise = rng.integers(-3, 4, size=(frames, 40, 56, 3))
    return np.clip(colour.astype(int) + noise, 0, 255).astype(np.uint8), colour


def post(view: LiveView, payload: object, content_type: str = "application/json", **headers: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        view.url + "input", data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": content_type, **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def read_mjpeg_frames(view: LiveView, count: int) -> list[bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", view.port, timeout=10)
    connection.request("GET", "/stream.mjpg")
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "multipart/x-mixed-replace; boundary=frame"
    jpegs = []
    while len(jpegs) < count:
        assert response.readline() == b"--frame\r\n"
        part_headers = {}
        while (line := response.readline()) != b"\r\n":
            name, value = line.decode().split(":", 1)
            part_headers[name.strip().lower()] = value.strip()
        assert part_headers["content-type"] == "image/jpeg"
        jpegs.append(response.read(int(part_headers["content-length"])))
        assert response.read(2) == b"\r\n"
    connection.close()
    return jpegs


def test_page_is_served_with_config() -> None:
    with LiveView(port=0, key_actions={"w": "forward", "q": "jump"}) as view:
        assert view.port > 0 and view.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(view.url, timeout=5) as response:
            page = response.read().decode()
        assert response.headers.get_content_type() == "text/html"
    assert '<img id="stream" src="/stream.mjpg"' in page and '"q": "jump"' in page
    assert "http://" not in page.replace(view.url, "") and "https://" not in page  # no CDN or external asset


def test_a_model_without_text_conditioning_gets_no_prompt_box_config() -> None:
    """The page hides its prompt box when the view says the model takes no prompt (the bundled model)."""
    assert '"prompt": false' in LiveView(takes_prompt=False).page()
    assert '"prompt": true' in LiveView().page()
    assert "CONFIG.prompt === false" in LiveView(takes_prompt=False).page()  # the page script acts on it


def test_mjpeg_delivers_decodable_frames_in_order() -> None:
    rng = np.random.default_rng(0)
    blocks = [solid_block(rng) for _ in range(2)]
    with LiveView(fps=200) as view:
        view.write(blocks[0][0], 0)
        jpegs: list[bytes] = []
        reader = threading.Thread(target=lambda: jpegs.extend(read_mjpeg_frames(view, 4)))
        reader.start()
        time.sleep(0.2)
        view.write(blocks[1][0], 1)
        reader.join(timeout=10)
    assert len(jpegs) == 4
    images = [np.asarray(Image.open(io.BytesIO(j)).convert("RGB")) for j in jpegs]
    assert all(im.shape == (40, 56, 3) for im in images)
    # first frame: newest of block 0 (a viewer joins live); then the three frames of block 1
    expected = [blocks[0][1], blocks[1][1], blocks[1][1], blocks[1][1]]
    for image, colour in zip(images, expected):
        assert np.abs(image.reshape(-1, 3).mean(0) - colour).max() < 4


def test_input_arrives_in_order_without_loss() -> None:
    with LiveView() as view:
        sent = []
        for i in range(40):
            kind = i % 5
            event = [
                {"type": "prompt", "text": f"prompt {i}"}, {"type": "action", "name": "left"},
                {"type": "action", "name": "forward"}, {"type": "pause"}, {"type": "resume"},
            ][kind]  # fmt: skip
            status, body = post(view, event)
            assert status == 200 and body["seq"] == [i]
            sent.append(event)
        status, body = post(view, [{"type": "action", "name": "right"}, {"type": "stop"}])  # a batch keeps order
        assert status == 200 and body["seq"] == [40, 41]
        sent += [{"type": "action", "name": "right"}, {"type": "stop"}]
        # rejected input adds nothing
        assert post(view, {"type": "action", "name": "fly"})[0] == 400
        assert post(view, {"type": "prompt", "text": ""})[0] == 400
        assert post(view, {"type": "stop"}, content_type="text/plain")[0] == 415
        assert post(view, {"type": "stop"}, Origin="http://evil.example")[0] == 403
        drained = view.inputs.drain()
    assert [{k: v for k, v in e.items() if k not in ("seq", "time_s")} for e in drained] == sent
    assert [e["seq"] for e in drained] == list(range(42))


def test_input_queue_concurrent_producers_lose_nothing() -> None:
    queue = InputQueue(max_events=1000)  # below its bound nothing is dropped
    threads = [
        threading.Thread(target=lambda t=t: [queue.put({"type": "prompt", "text": f"{t}-{i}"}) for i in range(200)])
        for t in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = queue.drain()
    assert len(events) == 800 and [e["seq"] for e in events] == list(range(800))
    for t in range(4):  # each producer's own order is kept
        assert [e["text"] for e in events if e["text"].startswith(f"{t}-")] == [f"{t}-{i}" for i in range(200)]
    assert queue.get(timeout=0.01) is None
    with pytest.raises(ConfigError, match="not one of"):
        queue.put({"type": "teleport"})


def test_sse_timings_and_clean_stop() -> None:
    rng = np.random.default_rng(1)
    view = LiveView().start()
    view.write(solid_block(rng)[0], 0)
    time.sleep(0.05)
    view.write(solid_block(rng)[0], 1)
    with urllib.request.urlopen(view.url + "events", timeout=5) as response:
        assert response.headers.get_content_type() == "text/event-stream"
        lines = [response.readline() for _ in range(4)]
        view.close()  # the open event stream must not keep the server alive
    stats = [json.loads(line[len(b"data: ") :]) for line in lines if line.startswith(b"data: ")]
    assert [s["block"] for s in stats] == [0, 1] and stats[1]["total_frames"] == 6
    assert stats[1]["interval_s"] >= 0.05 and stats[1]["fps"] == pytest.approx(3 / stats[1]["interval_s"])
    assert not view._thread.is_alive()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", view.port), timeout=1):
        pass


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed (apt-get install chromium)")
def test_headless_chromium_screenshot(tmp_path: Path) -> None:
    """The page renders in a real browser: video shows, and the timing chart is drawn from SSE."""
    y, x = np.mgrid[0:240, 0:416]
    done = threading.Event()
    with LiveView(fps=16) as view:

        def feed() -> None:  # keeps producing while the browser loads, like a real run
            block = 0
            while not done.is_set():
                hue = (x / 416 * 255 + block * 20) % 255
                frame = np.stack([hue, y / 240 * 255, 255 - hue * 0.5], -1).astype(np.uint8)
                view.write(np.repeat(frame[None], 3, 0), block)
                time.sleep(0.12 + 0.05 * (block % 3))
                block += 1

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(1.0)
        shot = tmp_path / "live_view.png"
        # --timeout stops loading after 3 s: the MJPEG and SSE responses never end, so "load" never fires
        command = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,640",
            f"--screenshot={shot}", "--timeout=3000", view.url,
        ]  # fmt: skip
        try:
            subprocess.run(command, capture_output=True, timeout=60, check=False)
        finally:
            done.set()
            feeder.join(timeout=5)
    assert shot.exists(), "chromium produced no screenshot"
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape[:2] == (640, 1100)
    assert image.reshape(-1, 3).std(0).mean() > 20  # not a blank page
