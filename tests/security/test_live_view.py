"""The live view of `inferix play` under raw-socket abuse (issue #20, item 3).

Every request is written by hand on a socket, so the server sees exactly what a hostile client sends:
negative or non-numeric Content-Length, oversized and malformed bodies, a foreign Host header (DNS
rebinding), floods of actions, idle connections and more connections than the server has threads for.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from inferix_core.sinks import live
from inferix_core.sinks.live import MAX_BODY_BYTES, InputQueue, LiveView
from inferix_core.sinks.live_inputs import MAX_QUEUED_EVENTS


@pytest.fixture
def view():
    v = LiveView().start()
    yield v
    v.close()


def raw_request(
    view: LiveView, head: str, body: bytes = b"", *, timeout: float = 5.0, half_close: bool = True
) -> tuple[int, bytes]:
    """Send `head` (request line + headers, no blank line) and `body`; return (status, body) of the answer.

    half_close=False keeps the sending side open, as a client streaming a body without end would.
    """
    with socket.create_connection(("127.0.0.1", view.port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except TimeoutError:
            pass
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data.partition(b"\r\n\r\n")[2]


def post(view: LiveView, body: bytes, *, length: str | None = None, host: str | None = None) -> tuple[int, bytes]:
    host = host or f"127.0.0.1:{view.port}"
    length = str(len(body)) if length is None else length
    head = f"POST /input HTTP/1.1\nHost: {host}\nContent-Type: application/json\nContent-Length: {length}"
    return raw_request(view, head, body)


def test_negative_content_length_does_not_bypass_the_body_cap(view):
    """`-1` made the server read until the client closed: any size passed the 64 KB cap (150 MB did)."""
    head = f"POST /input HTTP/1.1\nHost: 127.0.0.1:{view.port}\nContent-Type: application/json\nContent-Length: -1"
    chunk = json.dumps([{"type": "action", "name": "forward"}] * 100).encode()
    status, _ = raw_request(view, head, chunk, timeout=3, half_close=False)  # a body that has no end yet
    assert status == 400
    assert len(view.inputs) == 0


@pytest.mark.parametrize("length", ["abc", "1e3", "", " 12x", "0x10"])
def test_non_numeric_content_length_is_a_400(view, capfd, length):
    status, _ = post(view, b'{"type": "pause"}', length=length)
    assert status == 400 if length else status in (200, 400)
    assert "Traceback" not in capfd.readouterr().err


def test_oversized_body_is_a_413(view):
    status, _ = post(view, b" " * 10, length=str(MAX_BODY_BYTES + 1))
    assert status == 413 and len(view.inputs) == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "action", "name": ["a"]}',
        b'{"type": "action", "name": {"x": 1}}',
        b'{"type": ["action"]}',
        b'{"type": "prompt", "text": 5}',
        b"[" * 50000 + b"]" * 50000,
        b"\xff\xfe garbage",
        b'[1, {"type": "pause"}]',
    ],
    ids=["name-list", "name-dict", "type-list", "text-int", "deep", "bytes", "mixed-batch"],
)
def test_malformed_json_bodies_are_a_400_without_traceback(view, capfd, body):
    if len(body) > MAX_BODY_BYTES:
        body = b"[" * 30000 + b"]" * 30000
    status, answer = post(view, body)
    assert status == 400, answer
    assert len(view.inputs) == 0
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost.evil:{port}", ""])
def test_foreign_host_header_is_refused(view, host):
    host = host.format(port=view.port)
    head = f"GET / HTTP/1.1\nHost: {host}" if host else "GET / HTTP/1.0"
    assert raw_request(view, head)[0] == 403
    status, _ = post(view, b'{"type": "pause"}', host=host or "x")
    assert status == 403 and len(view.inputs) == 0


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_own_host_names_are_served(view, host):
    assert raw_request(view, f"GET / HTTP/1.1\nHost: {host.format(port=view.port)}")[0] == 200


def test_flood_of_actions_is_bounded_and_the_real_key_press_survives(view):
    batch = json.dumps([{"type": "action", "name": "forward"}] * 1500).encode()  # ~55 KB, under the cap
    for _ in range(20):  # 30,000 queued actions before the fix
        assert post(view, batch)[0] == 200
    assert post(view, b'{"type": "stop"}')[0] == 200
    assert post(view, b'{"type": "action", "name": "left"}')[0] == 200
    events = view.inputs.drain()
    assert len(events) <= MAX_QUEUED_EVENTS
    assert events[-1]["name"] == "left"  # the newest press is there, at the end
    assert any(e["type"] == "stop" for e in events)  # a stop is never the one dropped
    assert view.inputs.dropped > 0


def test_input_queue_drops_actions_before_other_events():
    q = InputQueue({"a"}, max_events=4)
    q.put_many([{"type": "prompt", "text": "p"}, {"type": "stop"}, {"type": "action", "name": "a"}])
    q.put_many([{"type": "action", "name": "a"}] * 10)
    kinds = [e["type"] for e in q.drain()]
    assert kinds == ["prompt", "stop", "action", "action"]


def test_session_action_backlog_is_bounded():
    """Behind a flood, a key pressed now steers one of the next few blocks (the session queue is bounded too)."""
    import torch

    from inferix_core.clients.session import MAX_QUEUED_ACTIONS, InteractiveSession
    from tests.test_api import tiny_world

    world = tiny_world(action_names=("left", "right", "straight"))
    prompt = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(7))
    session = InteractiveSession(world, prompt, width=48, height=32, seed=3, decode=False)
    for _ in range(4):
        session.inputs.put_many([{"type": "action", "name": "left"}] * 200)
        session.step()  # one block each; the flood piles up behind
    session.act("right")
    for _ in range(MAX_QUEUED_ACTIONS + 1):
        session.step()
    assert "right" in session.action_log[-(MAX_QUEUED_ACTIONS + 1) :]
    session.close()


def test_idle_connections_time_out(view, monkeypatch):
    assert live._Handler.timeout is not None and 0 < live._Handler.timeout <= 60  # on by default
    monkeypatch.setattr(live._Handler, "timeout", 0.5)  # shortened to keep the test quick
    with socket.create_connection(("127.0.0.1", view.port), timeout=5) as sock:
        sock.sendall(b"POST /input HTTP/1.1\r\n")  # then nothing: a slowloris client
        start = time.monotonic()
        assert sock.recv(100) == b""  # the server hung up on it
        assert 0.3 < time.monotonic() - start < 3


def test_connection_limit_caps_threads(view, monkeypatch):
    monkeypatch.setattr(live._Handler, "timeout", 30.0)  # so only the refused ones close within the test
    before = threading.active_count()
    socks = []
    try:
        for _ in range(live.MAX_CONNECTIONS + 8):
            s = socket.create_connection(("127.0.0.1", view.port), timeout=5)
            s.sendall(b"GET / HTTP/1.1\r\n")  # a request that never ends
            socks.append(s)
        time.sleep(0.5)
        assert threading.active_count() - before <= live.MAX_CONNECTIONS + 2
        # the ones over the limit are closed by the server (wait a little: the machine may be busy)
        closed: set[int] = set()
        deadline = time.monotonic() + 8
        while len(closed) < 8 and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                s.settimeout(0.05)
                try:
                    if s.recv(10) == b"":
                        closed.add(i)
                except ConnectionResetError:
                    closed.add(i)
                except TimeoutError:
                    pass
        assert len(closed) >= 8
    finally:
        for s in socks:
            s.close()
    time.sleep(0.3)
    assert raw_request(view, f"GET / HTTP/1.1\nHost: 127.0.0.1:{view.port}")[0] == 200  # slots come back
