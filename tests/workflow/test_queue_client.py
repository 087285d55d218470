"""`inferix queue` against a stand-in server speaking ComfyUI's HTTP API (no websocket: polling path)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from inferix_core.cli import main
from inferix_core.workflow.client import ComfyClient

WORKFLOW = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8}},
    "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}},
}


class FakeComfy(BaseHTTPRequestHandler):
    """POST /prompt validates width > 0; node 'Fail' produces an execution_error in /history."""

    history: dict = {}

    def log_message(self, *args):
        pass

    def _send(self, code, body, raw=False):
        data = body if raw else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["prompt"]
        if prompt["1"]["inputs"]["width"] <= 0:
            return self._send(
                400,
                {
                    "error": {
                        "type": "prompt_outputs_failed_validation",
                        "message": "Prompt outputs failed validation",
                        "details": "",
                    },
                    "node_errors": {
                        "1": {
                            "class_type": "EmptyImage",
                            "errors": [
                                {
                                    "message": "Value 0 smaller than min of 1",
                                    "details": "width",
                                    "extra_info": {"input_name": "width"},
                                }
                            ],
                        }
                    },
                },
            )
        pid = f"p{len(self.history)}"
        if prompt["2"]["class_type"] == "Fail":
            messages = [
                [
                    "execution_error",
                    {
                        "node_id": "2",
                        "node_type": "Fail",
                        "exception_type": "ValueError",
                        "exception_message": "bad things",
                    },
                ]
            ]
            self.history[pid] = {"outputs": {}, "status": {"status_str": "error", "messages": messages}}
        else:
            self.history[pid] = {
                "prompt": [0, pid, prompt],
                "status": {"status_str": "success", "messages": []},
                "outputs": {"2": {"images": [{"filename": "x_00001_.png", "subfolder": "", "type": "output"}]}},
            }
        self._send(200, {"prompt_id": pid, "number": 0, "node_errors": {}})

    def do_GET(self):
        url = urlparse(self.path)
        if url.path.startswith("/history/"):
            pid = url.path.rsplit("/", 1)[1]
            return self._send(200, {pid: self.history[pid]} if pid in self.history else {})
        if url.path == "/view":
            return self._send(200, f"bytes of {parse_qs(url.query)['filename'][0]}".encode(), raw=True)
        if url.path == "/object_info":
            return self._send(
                200,
                {
                    "EmptyImage": {"input": {"required": {"width": ["INT", {"min": 1}]}}, "output": ["IMAGE"]},
                    "SaveImage": {
                        "input": {"required": {"images": ["IMAGE", {}], "filename_prefix": ["STRING", {}]}},
                        "output": [],
                        "output_node": True,
                    },
                },
            )
        self._send(404, {})


@pytest.fixture
def server(monkeypatch):
    import inferix_core.workflow.client as client

    monkeypatch.setattr(ComfyClient, "connect", lambda self, cid: None)  # the polling path
    monkeypatch.setattr(client, "POLL_SECONDS", 0.01)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeComfy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def queue(capsys, tmp_path, server, workflow, *extra):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(workflow))
    code = main(
        ["queue", str(path), "--server", server, "--output-dir", str(tmp_path / "out"), "--no-progress", *extra]
    )
    return code, capsys.readouterr()


def test_success_downloads_outputs(capsys, tmp_path, server):
    code, out = queue(capsys, tmp_path, server, WORKFLOW, "--set", "1.width=16")
    assert code == 0, out.err
    assert (tmp_path / "out" / "x_00001_.png").read_bytes() == b"bytes of x_00001_.png"
    assert str(tmp_path / "out" / "x_00001_.png") in out.out


def test_validation_error_uses_server_text(capsys, tmp_path, server):
    code, out = queue(capsys, tmp_path, server, WORKFLOW, "--set", "1.width=0")
    assert code == 2
    assert out.err == (
        "error: the server refused the workflow: Prompt outputs failed validation\n"
        "  - node 1 (EmptyImage), input 'width': Value 0 smaller than min of 1: width\n"
    )


def test_execution_error_uses_server_text(capsys, tmp_path, server):
    wf = json.loads(json.dumps(WORKFLOW))
    wf["2"]["class_type"] = "Fail"
    code, out = queue(capsys, tmp_path, server, wf)
    assert code == 2 and "node 2: Fail failed on the server: ValueError: bad things" in out.err


def test_override_of_unknown_input_is_caught_locally(capsys, tmp_path, server):
    code, out = queue(capsys, tmp_path, server, WORKFLOW, "--set", "1.widht=3")
    assert code == 2 and "did you mean 'width'" in out.err


def test_unreachable_server(capsys, tmp_path):
    code, out = queue(capsys, tmp_path, "http://127.0.0.1:9", WORKFLOW)
    assert code == 2 and "cannot reach the ComfyUI server" in out.err
