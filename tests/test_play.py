"""`inferix play` over real HTTP on a tiny random model (actions in, MJPEG and stats out, stop, playable mp4),
its key map and workflow reading, and `inferix info`."""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from inferix_core import cli
from inferix_core.commands import play as play_cmd
from inferix_core.commands.play import PlaySetup, key_map, play
from inferix_core.errors import WorkflowError
from tests.test_api import tiny_world

DRIVING = ("none", "steer_left", "steer_right", "accelerate", "brake")
W, H = 48, 32


def post(port: int, event) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/input", json.dumps(event), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, body
    return body


def read_mjpeg_frames(port: int, count: int) -> list[Image.Image]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/stream.mjpg")
    resp = conn.getresponse()
    assert resp.getheader("Content-Type").startswith("multipart/x-mixed-replace")
    frames = []
    while len(frames) < count:
        assert resp.readline() == b"--frame\r\n"
        headers = {}
        while (line := resp.readline()) != b"\r\n":
            key, value = line.decode().split(":", 1)
            headers[key.strip().lower()] = value.strip()
        frames.append(Image.open(io.BytesIO(resp.read(int(headers["content-length"])))))
        resp.readline()
    conn.close()
    return frames


def wait_for_session_event(port: int, predicate) -> dict:
    """Read the SSE stream until a per-block session event satisfies `predicate`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/events")
    resp = conn.getresponse()
    while True:
        line = resp.readline()
        assert line, "event stream ended"
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            if event.get("type") == "session" and predicate(event):
                conn.close()
                return event


def test_key_map_reaches_every_action():
    keys = key_map(DRIVING)
    assert keys["w"] == keys["arrowup"] == "accelerate" and keys["s"] == "brake"
    assert keys["a"] == "steer_left" and keys["arrowright"] == "steer_right" and keys["x"] == "none"
    assert set(keys.values()) == set(DRIVING)
    assert key_map(("jump", "left")) == {"a": "left", "arrowleft": "left", "1": "jump"}
    assert key_map(()) == {}


def test_play_over_http_actions_mjpeg_stop_and_a_playable_mp4(tmp_path):
    world = tiny_world(action_names=DRIVING)
    ready = threading.Event()
    views, results = [], []

    def serve():
        results.append(
            play(
                world,
                width=W,
                height=H,
                seed=4,
                port=0,
                output=tmp_path / "play.mp4",
                on_ready=lambda view: (views.append(view), ready.set()),
            )
        )

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert ready.wait(60), "live view did not start"
        port = views[0].port
        post(port, {"type": "action", "name": "steer_left"})
        post(port, [{"type": "action", "name": "accelerate"}, {"type": "action", "name": "brake"}])
        frames = read_mjpeg_frames(port, 3)
        assert all(f.format == "JPEG" and f.size == (W, H) for f in frames)
        wait_for_session_event(port, lambda e: e["action"] == "brake")
        post(port, {"type": "stop"})
    finally:
        if thread.is_alive() and views:
            views[0].inputs.put({"type": "stop"})
        thread.join(60)
    assert not thread.is_alive()
    result = results[0]
    log = result.action_log
    i = log.index("steer_left")
    assert log[:i] == ["none"] * i  # the idle action until the first key
    assert log[i : i + 3] == ["steer_left", "accelerate", "brake"]  # one per block, in order
    assert result.output == tmp_path / "play.mp4" and not (tmp_path / "play.partial.mp4").exists()
    with av.open(str(result.output)) as f:
        assert sum(1 for _ in f.decode(video=0)) == result.num_frames > 0


def test_cli_play_stops_after_max_blocks(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(play_cmd, "load_setup", lambda args: PlaySetup(tiny_world(DRIVING), width=W, height=H))
    out = tmp_path / "cli.mp4"
    assert cli.main(["play", "bundled", "--port", "0", "--max-blocks", "1", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "live view: http://127.0.0.1:" in printed and "w → accelerate" in printed
    assert "stopped after 1 blocks" in printed and str(out) in printed
    with av.open(str(out)) as f:
        assert sum(1 for _ in f.decode(video=0)) > 0
    assert cli.main(["play", "--port", "0", "--max-blocks", "1", "--no-save"]) == 0
    assert "video:" not in capsys.readouterr().out


def test_workflow_source_reads_the_inferix_nodes(tmp_path, monkeypatch):
    loaded = {}
    monkeypatch.setattr(
        play_cmd, "load_world_model", lambda path, options: loaded.update(path=path, **vars(options)) or "wm"
    )
    graph = {
        "1": {"class_type": "InferixLoadWorldModel", "inputs": {"model": "bundled", "vae": "bundled",
              "preview_decoder": "none", "text_encoder": "bundled", "dtype": "auto", "attention": "sdpa",
              "device": "auto"}},
        "3": {"class_type": "InferixKVCacheConfig", "inputs": {"window_frames": 12, "sink_frames": 3,
              "page_frames": 0, "offload": "off", "gpu_budget_gb": 0.0, "quantization": "none"}},
        "4": {"class_type": "InferixBlockDenoise", "inputs": {"world_model": ["1", 0], "prompt": "a coast road",
              "width": 128, "height": 96, "seed": 42}},
    }  # fmt: skip
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    args = cli.build_parser().parse_args(["play", str(path)])
    setup = play_cmd.load_setup(args)
    assert loaded["path"] == "bundled" and loaded["vae_path"] is None and loaded["attention"] == "sdpa"
    assert (loaded["fp8"], loaded["compile"], loaded["cuda_graphs"]) == (False,) * 3  # a loader saved without them
    assert (setup.prompt, setup.width, setup.height, setup.seed) == ("a coast road", 128, 96, 42)
    assert setup.cache.window_frames == 12 and setup.cache.sink_frames == 3
    graph["1"]["inputs"]["compile"] = graph["1"]["inputs"]["cuda_graphs"] = True  # the input, or the flag, turns it on
    path.write_text(json.dumps(graph))
    play_cmd.load_setup(cli.build_parser().parse_args(["play", str(path), "--fp8"]))
    assert (loaded["fp8"], loaded["compile"], loaded["cuda_graphs"]) == (True,) * 3
    path.write_text(json.dumps({"nodes": [], "links": []}))
    with pytest.raises(WorkflowError, match="Export \\(API\\)"):
        play_cmd.load_setup(args)


def test_info_prints_environment_and_the_model(monkeypatch, capsys):
    assert cli.main(["info"]) == 0
    text = capsys.readouterr().out
    assert "torch" in text and "self_forcing" in text and "sdpa" in text and "available" in text
    monkeypatch.setattr("inferix_core.commands.info.load_world_model", lambda *a, **k: tiny_world(DRIVING))
    assert cli.main(["info", "tiny.safetensors"]) == 0
    text = capsys.readouterr().out
    assert "family: bundled" in text and "actions: none, steer_left" in text


def test_speed_flags_reach_load_world_model(monkeypatch, capsys):
    loaded = []
    monkeypatch.setattr(
        play_cmd, "load_world_model", lambda path, options: loaded.append(vars(options)) or tiny_world(DRIVING)
    )
    monkeypatch.setattr(play_cmd, "bundled_size", lambda: (W, H))
    play_cmd.load_setup(cli.build_parser().parse_args(["play", "bundled"]))
    play_cmd.load_setup(cli.build_parser().parse_args(["play", "bundled", "--fp8", "--compile", "--cuda-graphs"]))
    assert [(kw["fp8"], kw["compile"], kw["cuda_graphs"]) for kw in loaded] == [(False,) * 3, (True,) * 3]
    monkeypatch.setattr(
        "inferix_core.commands.info.load_world_model",
        lambda path, options: loaded.append(vars(options)) or tiny_world(DRIVING),
    )
    assert cli.main(["info", "tiny.safetensors", "--fp8"]) == 0 and loaded[-1]["fp8"] is True
    capsys.readouterr()


def test_ctrl_c_leaves_a_playable_file(tmp_path, monkeypatch):
    real = play_cmd.block_stats

    def interrupt_after_second_block(block):
        if block.index == 1:
            raise KeyboardInterrupt  # as Ctrl-C would, between blocks
        return real(block)

    monkeypatch.setattr(play_cmd, "block_stats", interrupt_after_second_block)
    result = play(tiny_world(DRIVING), width=W, height=H, port=0, output=tmp_path / "cut.mp4")
    assert result.interrupted and result.num_blocks == 2 and not (tmp_path / "cut.partial.mp4").exists()
    with av.open(str(result.output)) as f:
        assert sum(1 for _ in f.decode(video=0)) == result.num_frames > 0


def test_memory_flags_reach_load_world_model(monkeypatch, capsys):
    loaded = []
    monkeypatch.setattr(
        play_cmd, "load_world_model", lambda path, options: loaded.append(vars(options)) or tiny_world(DRIVING)
    )
    monkeypatch.setattr(play_cmd, "bundled_size", lambda: (W, H))
    args = ["play", "bundled", "--gpu-memory", "24GB", "--fp8-weights", "--text-encoder-placement", "offload"]
    play_cmd.load_setup(cli.build_parser().parse_args(args))
    assert loaded[-1]["gpu_memory"] == 24 * 2**30 and loaded[-1]["fp8_weights"] is True
    assert loaded[-1]["text_encoder_placement"] == "offload" and loaded[-1]["resident_blocks"] is None
    play_cmd.load_setup(cli.build_parser().parse_args(["play", "bundled", "--resident-blocks", "3"]))
    assert loaded[-1]["resident_blocks"] == 3 and loaded[-1]["gpu_memory"] is None
    monkeypatch.setattr(
        "inferix_core.commands.info.load_world_model",
        lambda path, options: loaded.append(vars(options)) or tiny_world(DRIVING),
    )
    assert cli.main(["info", "tiny.safetensors", "--gpu-memory", "8g"]) == 0
    assert loaded[-1]["gpu_memory"] == 8 * 2**30
    capsys.readouterr()
    assert cli.main(["info", "tiny.safetensors", "--gpu-memory", "lots"]) == 2  # one-line error, exit 2
    assert "like 24GB" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium")
DOC_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_live_view_of_the_driving_world_in_chromium(tmp_path):
    """`inferix play bundled` as a person sees it: the bundled driving world streaming into the live view in
    a real browser while the keys steer it (the screenshot is docs/images/live_view.png with
    INFERIX_UPDATE_DOC_IMAGES=1)."""
    from inferix_core.models.registry import load_world_model

    world = load_world_model("bundled", device="cpu")
    width, height = play_cmd.bundled_size()
    ready = threading.Event()
    views, results = [], []

    def serve():
        results.append(
            play(world, width=width, height=height, seed=7, port=0, on_ready=lambda v: (views.append(v), ready.set()))
        )

    thread = threading.Thread(target=serve)
    thread.start()
    shot = tmp_path / "live_view.png"
    try:
        assert ready.wait(120), "live view did not start"
        port = views[0].port
        post(port, {"type": "action", "name": "accelerate"})  # held: the car drives on down the road
        wait_for_session_event(port, lambda e: e["block"] >= 8)  # a few bars in the timing chart
        # --timeout stops loading after 4 s: the MJPEG and SSE responses never end, so "load" never fires
        command = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,640",
            f"--screenshot={shot}", "--timeout=4000", views[0].url,
        ]  # fmt: skip
        subprocess.run(command, capture_output=True, timeout=90, check=False)
        post(port, {"type": "stop"})
    finally:
        if thread.is_alive() and views:
            views[0].inputs.put({"type": "stop"})
        thread.join(120)
    assert not thread.is_alive()
    assert shot.exists(), "chromium produced no screenshot"
    page = np.asarray(Image.open(shot).convert("RGB")).astype(float)
    assert page.shape[:2] == (640, 1100)
    # the video box (left of the side panel) shows a picture: varied colour, and its middle is not the black box
    video = page[70:590, 20:720]
    assert video.std(axis=(0, 1)).mean() > 20 and page[330, 370].max() > 40
    assert results[0].action_log[-1] == "accelerate" and results[0].num_blocks > 8
    if os.environ.get("INFERIX_UPDATE_DOC_IMAGES") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, DOC_IMAGES / "live_view.png")
