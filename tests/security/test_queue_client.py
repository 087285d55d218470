"""`inferix queue` against a hostile HTTP server on 127.0.0.1 (issue #20, items 1, 7 and 8).

The server answers whatever a test puts in `Hostile.routes`: file entries that climb out of the output
folder, names that already exist, bodies that never end or trickle, and malformed JSON in node_errors,
history and websocket messages. The client must confine, bound and report each in one line.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from inferix_core.cli import build_parser, main
from inferix_core.errors import WorkflowError
from inferix_core.workflow.client import ComfyClient, ServerError

WORKFLOW = {"1": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}}


class Hostile(BaseHTTPRequestHandler):
    """Route (method, path) → callable(handler) that writes the whole answer itself."""

    routes: dict = {}

    def log_message(self, *args):
        pass

    def send_json(self, code: int, body) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        if method == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlparse(self.path).path
        for (m, prefix), answer in self.routes.items():
            if m == method and path.startswith(prefix):
                return answer(self)
        self.send_json(404, {})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")


@pytest.fixture
def hostile(monkeypatch):
    import inferix_core.workflow.client as client

    monkeypatch.setattr(ComfyClient, "connect", lambda self, cid: None)
    monkeypatch.setattr(client, "POLL_SECONDS", 0.01)
    Hostile.routes = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield Hostile.routes, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def finished_with(outputs: dict):
    """Routes of a server that accepts the prompt and reports `outputs`; /view answers the file name."""
    return {
        ("POST", "/prompt"): lambda h: h.send_json(200, {"prompt_id": "p1"}),
        ("GET", "/history/"): lambda h: h.send_json(
            200, {"p1": {"status": {"status_str": "success", "messages": []}, "outputs": outputs}}
        ),
        ("GET", "/view"): lambda h: h.send_json(200, "payload of " + parse_qs(urlparse(h.path).query)["filename"][0]),
    }


def queue(tmp_path: Path, server: str, *extra: str) -> int:
    wf = tmp_path / "wf.json"
    wf.write_text(json.dumps(WORKFLOW))
    return main(["queue", str(wf), "--server", server, "--no-progress", *extra])


NAME = f"escaped-{uuid.uuid4().hex[:8]}.txt"  # unique: a file left by an unfixed run must not count
ESCAPES = [
    {"filename": "../" + NAME, "subfolder": "", "type": "output"},
    {"filename": NAME, "subfolder": "../..", "type": "output"},
    {"filename": NAME, "subfolder": "a/../../..", "type": "output"},
    {"filename": NAME, "subfolder": "/tmp", "type": "output"},
    {"filename": "/tmp/" + NAME, "subfolder": "", "type": "output"},
    {"filename": NAME, "subfolder": "", "type": "../.."},
    {"filename": NAME, "subfolder": "", "type": "/tmp"},
    {"filename": [NAME], "subfolder": "", "type": "output"},
    {"filename": "..", "subfolder": "", "type": "output"},
]


@pytest.mark.parametrize("entry", ESCAPES, ids=lambda e: f"{e['subfolder']}|{str(e['filename'])[:12]}|{e['type']}")
def test_download_never_leaves_the_output_folder(hostile, tmp_path, capsys, entry):
    routes, server = hostile
    routes.update(finished_with({"9": {"images": [entry]}}))
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    before = {p for p in tmp_path.rglob("*")}
    assert queue(work, server, "--output-dir", str(work / "out")) == 2
    err = capsys.readouterr().err
    assert "outside the output folder" in err or "not one of" in err or "not a file name" in err
    assert "Traceback" not in err
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(work / "out" in p.parents or p == work / "out" for p in created - {work / "wf.json"}), created
    assert not list(tmp_path.rglob(NAME)) and not (Path("/tmp") / NAME).exists()


def test_download_never_overwrites(hostile, tmp_path, capsys):
    routes, server = hostile
    routes.update(finished_with({"9": {"images": [{"filename": "clip.mp4", "subfolder": "sub", "type": "output"}]}}))
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "clip.mp4").write_text("the user's own file")
    assert queue(tmp_path, server, "--output-dir", str(out)) == 0
    assert (out / "sub" / "clip.mp4").read_text() == "the user's own file"
    new = [p for p in (out / "sub").iterdir() if p.name != "clip.mp4"]
    assert len(new) == 1 and new[0].read_text() == "payload of clip.mp4", new
    assert str(new[0]) in capsys.readouterr().out


def test_trickling_server_is_cut_off_at_the_request_timeout(hostile):
    routes, server = hostile

    def trickle(h):
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(100):  # one byte every 0.2 s: each read succeeds, so only an overall limit stops it
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.2)

    routes[("GET", "/history/")] = trickle
    client = ComfyClient(server, request_timeout_s=1.5)
    start = time.monotonic()
    with pytest.raises(ServerError, match="did not complete within"):
        client.history("p1")
    assert time.monotonic() - start < 4


def test_queue_has_a_finite_default_timeout():
    args = build_parser().parse_args(["queue", "wf.json"])
    assert args.timeout is not None and 0 < args.timeout < float("inf")


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "endless"])
def test_bodies_are_bounded(hostile, declared):
    routes, server = hostile

    def huge(h):
        h.send_response(200)
        if declared:
            h.send_header("Content-Length", str(10**12))
        h.end_headers()
        chunk = b"[" * 65536
        for _ in range(64):  # 4 MiB, then stop (the client must have given up long before)
            h.wfile.write(chunk)

    routes[("GET", "/history/")] = huge
    client = ComfyClient(server, max_response_bytes=1 << 20)
    with pytest.raises(ServerError, match="limit"):
        client.history("p1")


def test_downloads_are_bounded_and_leave_nothing(hostile, tmp_path):
    routes, server = hostile
    routes[("GET", "/view")] = lambda h: h.send_json(200, "x" * 5000)
    client = ComfyClient(server, max_download_bytes=1000)
    with pytest.raises(ServerError, match="limit"):
        client.download({"filename": "big.bin", "subfolder": "", "type": "output"}, tmp_path)
    assert list(tmp_path.iterdir()) == []


MALFORMED_REFUSALS = [
    {"error": "bad", "node_errors": {"1": "not a dict"}},
    {"error": {"message": ["a"]}, "node_errors": {"1": {"errors": "oops", "class_type": ["x"]}}},
    {"error": {"message": "m"}, "node_errors": {"1": {"errors": [1, None, {"extra_info": "no"}]}}},
    {"error": 7, "node_errors": [1, 2]},
]


@pytest.mark.parametrize("body", MALFORMED_REFUSALS)
def test_malformed_node_errors_give_one_line(hostile, tmp_path, capsys, body):
    routes, server = hostile
    routes[("POST", "/prompt")] = lambda h: h.send_json(400, body)
    assert queue(tmp_path, server) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the server refused the workflow") and "Traceback" not in err


MALFORMED_HISTORY = [
    "[1, 2, 3]",
    '{"p1": "done"}',
    '{"p1": {"status": "ok", "outputs": []}}',
    '{"p1": {"status": {"messages": [1, ["execution_error"], ["x", 2]]}, "outputs": {"9": 3}}}',
    "{not json",
]


@pytest.mark.parametrize("history", MALFORMED_HISTORY)
def test_malformed_history_gives_one_line(hostile, tmp_path, capsys, history):
    routes, server = hostile
    routes[("POST", "/prompt")] = lambda h: h.send_json(200, {"prompt_id": "p1"})
    routes[("GET", "/history/")] = lambda h: h.send_json(200, history)
    code = queue(tmp_path, server)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0 or (code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1), err


class ScriptedSocket:
    """A websocket stand-in that hands out a hostile server's messages, then times out."""

    def __init__(self, messages):
        self.messages = list(messages)

    def settimeout(self, t):
        pass

    def recv(self):
        if self.messages:
            return self.messages.pop(0)
        import websocket

        raise websocket.WebSocketTimeoutException("idle")


def test_malformed_websocket_messages_are_skipped(hostile):
    pytest.importorskip("websocket")
    routes, server = hostile
    routes.update(finished_with({}))
    seen = []
    ws = ScriptedSocket(
        [
            "{not json",
            "[1, 2]",
            '"text"',
            '{"type": "progress", "data": []}',
            '{"type": "progress", "data": {"value": "x", "max": {}}}',
            '{"type": "progress", "data": {"prompt_id": ["p1"], "value": 1, "max": 2}}',
            '{"type": "execution_error", "data": "boom"}',
            "[" * 100000,
            '{"type": "progress", "data": {"prompt_id": "p1", "node": "3", "value": 1, "max": 2}}',
            '{"type": "executing", "data": {"node": null, "prompt_id": "p1"}}',
        ]
    )
    run = ComfyClient(server).wait("p1", ws, timeout_s=10, on_progress=seen.append)
    assert run.prompt_id == "p1"
    assert [(e.node_id, e.value, e.max) for e in seen] == [("3", 1, 2)]


def test_websocket_execution_error_with_odd_fields_is_one_workflow_error(hostile):
    pytest.importorskip("websocket")
    _routes, server = hostile
    ws = ScriptedSocket(['{"type": "execution_error", "data": {"node_id": [1], "exception_message": {"a": 1}}}'])
    with pytest.raises(WorkflowError, match="failed on the server"):
        ComfyClient(server).wait("p1", ws, timeout_s=10)
