"""Live view: a small local web server that plays the stream in a browser and collects user input.

Video goes out as MJPEG (``multipart/x-mixed-replace``, an ``<img>`` plays it), per-block timings as
Server-Sent Events, and input comes back as JSON POSTs into an ``InputQueue`` that the interactive session
drains at block boundaries. Stdlib only (``http.server``); loopback by default. It does not decide what
an input means: pausing, prompts and actions are the session's business.
"""

from __future__ import annotations

import http.server
import io
import ipaddress
import json
import logging
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from PIL import Image

from inferix_core.controls import ControlSpec
from inferix_core.errors import ConfigError
from inferix_core.sinks.base import FrameSink, to_uint8_frames
from inferix_core.sinks.live_inputs import (
    DEFAULT_KEY_ACTIONS,
    InputQueue,
)

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_CONNECTIONS = 32  # open connections (each holds a thread); more are closed at once
SOCKET_TIMEOUT_S = 10.0  # a client that sends or reads nothing for this long is dropped
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_POLL_S = 0.25  # how often streaming handlers look at the stop flag


class _Broadcast:
    """Recent frames and stats with sequence numbers; readers wait on one condition."""

    def __init__(self, buffer_frames: int, jpeg_quality: int):
        self.cond = threading.Condition()
        self.frames: deque[tuple[int, np.ndarray]] = deque(maxlen=buffer_frames)
        self.next_frame = 0
        self.stats: deque[tuple[int, str]] = deque(maxlen=256)
        self.next_stat = 0
        self.jpeg_quality = jpeg_quality
        self._jpegs: OrderedDict[int, bytes] = OrderedDict()  # encode each frame once for all viewers
        self._jpeg_lock = threading.Lock()

    def jpeg(self, seq: int, frame: np.ndarray) -> bytes:
        with self._jpeg_lock:
            if seq in self._jpegs:
                return self._jpegs[seq]
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=self.jpeg_quality)
        with self._jpeg_lock:
            self._jpegs[seq] = buffer.getvalue()
            while len(self._jpegs) > 16:
                self._jpegs.popitem(last=False)
        return buffer.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_TIMEOUT_S  # StreamRequestHandler puts it on the socket: slow clients cannot hold a thread

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("live view: " + format, *args)

    def _host_allowed(self) -> bool:
        """Refuse (403) a Host header naming anything but this server: DNS rebinding sends the attacker's name."""
        if self.server.view.host_allowed(self.headers.get("Host")):
            return True
        self._send_json(403, {"error": "unexpected Host header; open the live view at its own address"})
        return False

    def _send_bytes(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json")

    def do_GET(self) -> None:
        if not self._host_allowed():
            return
        path = urlsplit(self.path).path
        try:
            if path in ("/", "/index.html"):
                self._send_bytes(200, self.server.view.page().encode(), "text/html; charset=utf-8")
            elif path == "/stream.mjpg":
                self._stream_mjpeg()
            elif path == "/events":
                self._stream_events()
            else:
                self._send_json(404, {"error": f"no such path {path}"})
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("live view client %s went away", self.client_address)

    def do_POST(self) -> None:
        if not self._host_allowed():
            return
        if urlsplit(self.path).path != "/input":
            self._send_json(404, {"error": "POST input events to /input"})
            return
        # A JSON content type forces a CORS preflight, which we never grant, so other web pages open in the
        # same browser cannot inject input; the Origin check covers the rest.
        origin = self.headers.get("Origin")
        if origin and urlsplit(origin).netloc != self.headers.get("Host"):
            self._send_json(403, {"error": f"cross-origin input from {origin} refused"})
            return
        if self.headers.get_content_type() != "application/json":
            self._send_json(415, {"error": "send input as Content-Type: application/json"})
            return
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._send_json(400, {"error": "send the body with a Content-Length, not a Transfer-Encoding"})
            return
        raw_length = (self.headers.get("Content-Length") or "0").strip()
        if not raw_length.isdigit():  # also refuses "-1", which read() would take as "until the peer closes"
            self.close_connection = True
            self._send_json(400, {"error": f"Content-Length {raw_length[:40]!r} is not a byte count"})
            return
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send_json(413, {"error": f"body of {length} bytes exceeds {MAX_BODY_BYTES}"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            events = self.server.view.inputs.put_many(body if isinstance(body, list) else [body])
        except (ValueError, ConfigError, RecursionError) as error:  # json.JSONDecodeError is a ValueError
            self._send_json(400, {"error": str(error)[:300]})
            return
        self._send_json(200, {"accepted": len(events), "seq": [e["seq"] for e in events]})

    def _stream_mjpeg(self) -> None:
        view, hub = self.server.view, self.server.view.hub
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        with hub.cond:
            last = max(hub.next_frame - 2, -1)  # start with the newest frame already there
        period = 1.0 / view.fps
        due = time.perf_counter()
        while not view.stopping.is_set():
            with hub.cond:
                hub.cond.wait_for(lambda last=last: hub.next_frame - 1 > last or view.stopping.is_set(), _POLL_S)
                if hub.next_frame - 1 <= last:
                    continue
                oldest = hub.frames[0][0]
                # A viewer more than a buffer behind skips ahead rather than lagging further.
                seq = max(last + 1, oldest)
                frame = hub.frames[seq - oldest][1]
            jpeg = hub.jpeg(seq, frame)
            header = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode()
            self.wfile.write(header + jpeg + b"\r\n")
            self.wfile.flush()
            last = seq
            due = max(due + period, time.perf_counter() - period)  # play blocks back at fps, not in bursts
            time.sleep(max(0.0, due - time.perf_counter()))

    def _stream_events(self) -> None:
        view, hub = self.server.view, self.server.view.hub
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        with hub.cond:
            last = hub.stats[0][0] - 1 if hub.stats else hub.next_stat - 1  # replay history for the chart
        idle_s = 0.0
        while not view.stopping.is_set():
            with hub.cond:
                hub.cond.wait_for(lambda last=last: hub.next_stat - 1 > last or view.stopping.is_set(), _POLL_S)
                pending = [(s, text) for s, text in hub.stats if s > last]
            if pending:
                self.wfile.write(b"".join(f"data: {text}\n\n".encode() for _, text in pending))
                last, idle_s = pending[-1][0], 0.0
            else:
                idle_s += _POLL_S
                if idle_s >= 15:  # comment line keeps proxies and the browser from timing out
                    self.wfile.write(b": keep-alive\n\n")
                    idle_s = 0.0
            self.wfile.flush()


class _Server(http.server.ThreadingHTTPServer):
    """One thread per connection, at most MAX_CONNECTIONS of them; the rest are closed unanswered."""

    daemon_threads = True  # viewers never keep the process alive
    view: LiveView
    max_connections = MAX_CONNECTIONS

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            logger.warning("live view: %d connections open; refusing %s", self.max_connections, client_address)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line per broken client (timeouts, resets), not a traceback on the console."""
        import sys

        logger.debug("live view: client %s: %s", client_address, sys.exc_info()[1])


class _Server6(_Server):
    address_family = socket.AF_INET6


class LiveView(FrameSink):
    """Serve the stream at ``http://host:port/``; user input lands in ``self.inputs``.

    Args:
        host: bind address; loopback by default. Anything else exposes the view (and input) to the network.
        port: TCP port; 0 picks a free one (read it back from ``.port`` / ``.url``).
        fps: playback rate for viewers (frames per second).
        jpeg_quality: 1-100.
        key_actions: lower-cased ``KeyboardEvent.key`` → action name; defaults to WASD / arrows.
        buffer_frames: frames kept for viewers that fall behind.
        controls: keyboard/mouse models (Matrix-Game 2.0): the page sends held keys and pointer-lock
            mouse movement as ``control`` events instead of named actions.

    While a session is branched it writes the futures side by side here (``shows_branches``); other sinks
    get only the future that is kept.
    """

    shows_branches = True

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        fps: float = 16.0,
        *,
        jpeg_quality: int = 85,
        key_actions: Mapping[str, str] | None = None,
        buffer_frames: int = 64,
        controls: ControlSpec | None = None,
        takes_prompt: bool = True,
        prompt_hint: str | None = None,
    ):
        if fps <= 0 or not 1 <= jpeg_quality <= 100 or buffer_frames < 1:
            raise ConfigError(
                f"LiveView needs fps > 0, jpeg_quality in [1, 100] and buffer_frames >= 1; "
                f"got fps={fps}, jpeg_quality={jpeg_quality}, buffer_frames={buffer_frames}."
            )
        self.host, self.port, self.fps = host, port, float(fps)
        self.key_actions = dict(DEFAULT_KEY_ACTIONS if key_actions is None else key_actions)
        self.controls = controls
        self.takes_prompt = takes_prompt  # False: the model has no text conditioning, the page shows no prompt box
        self.prompt_hint = prompt_hint  # the prompt box's placeholder (a fixed-vocabulary model lists its words)
        self.inputs = InputQueue(set(self.key_actions.values()), controls=controls)
        self.hub = _Broadcast(buffer_frames, jpeg_quality)
        self.stopping = threading.Event()
        self.num_frames = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._last_write_s: float | None = None
        self._page: str | None = None

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a request's Host names this server: its bind address or a loopback name, at its port.

        A wildcard bind (0.0.0.0, ::) was an explicit choice to serve the network, so any name passes there.
        """
        if self.host in ("0.0.0.0", "::", ""):
            return True
        if not host_header:
            return False
        split = urlsplit("//" + host_header.strip())
        try:
            name, port = split.hostname, split.port
        except ValueError:
            return False
        return port == self.port and name is not None and name.lower() in {self.host.lower(), *LOCAL_NAMES}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> LiveView:
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if not loopback:
            logger.warning("live view listens on %s: anyone who can reach it can watch and send input", self.host)
        server_class = _Server6 if ":" in self.host else _Server
        self._httpd = server_class((self.host, self.port), _Handler)
        self._httpd.view = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="inferix-live-view", daemon=True)
        self._thread.start()
        self._last_write_s = time.perf_counter()
        logger.info("live view at %s", self.url)
        return self

    def __enter__(self) -> LiveView:
        return self.start()

    def page(self) -> str:
        """The self-contained HTML page with this view's key map and fps filled in."""
        if self._page is None:
            template = resources.files("inferix_core.sinks").joinpath("live.html").read_text(encoding="utf-8")
            controls = None if self.controls is None else self.controls.page_config()
            config = json.dumps(
                {
                    "key_actions": self.key_actions,
                    "fps": self.fps,
                    "controls": controls,
                    "prompt": self.takes_prompt,
                    "prompt_hint": self.prompt_hint,
                }
            )
            self._page = template.replace("/*INFERIX_CONFIG*/{}", config)
        return self._page

    def write(self, frames: Any, block_index: int) -> None:
        """Publish a block to viewers and post its timing (time since the previous block)."""
        array = to_uint8_frames(frames)
        now = time.perf_counter()
        interval_s = now - self._last_write_s if self._last_write_s is not None else 0.0
        self._last_write_s = now
        with self.hub.cond:
            for frame in array:
                self.hub.frames.append((self.hub.next_frame, frame))
                self.hub.next_frame += 1
            self.hub.cond.notify_all()
        self.num_frames += len(array)
        self.post_stats(
            {"type": "block", "block": block_index, "frames": len(array), "total_frames": self.num_frames,
             "interval_s": interval_s, "fps": len(array) / interval_s if interval_s > 0 else None}
        )  # fmt: skip

    def post_stats(self, stats: Mapping[str, Any]) -> None:
        """Send any JSON-able dict to the page (e.g. the profiler's per-block stage times)."""
        text = json.dumps(dict(stats), default=float)
        with self.hub.cond:
            self.hub.stats.append((self.hub.next_stat, text))
            self.hub.next_stat += 1
            self.hub.cond.notify_all()

    def close(self) -> None:
        """Stop serving: streaming handlers notice within ``_POLL_S`` and the port is released."""
        if self.closed:
            return
        self.closed = True
        self.stopping.set()
        with self.hub.cond:
            self.hub.cond.notify_all()
        if self._httpd is not None:
            # shutdown() waits for serve_forever without a limit; wait in a helper so close() is bounded
            stopper = threading.Thread(target=self._httpd.shutdown, name="inferix-live-view-stop", daemon=True)
            stopper.start()
            stopper.join(timeout=5)
            self._httpd.server_close()
            assert self._thread is not None
            self._thread.join(timeout=5)
            logger.info("live view at %s stopped", self.url)
