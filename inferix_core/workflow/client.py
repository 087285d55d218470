"""A small client for a running ComfyUI server: submit a workflow, follow it, fetch its outputs.

Speaks ComfyUI's HTTP API (`POST /prompt`, `GET /history/{id}`, `GET /view`, `POST /interrupt`,
`GET /object_info`) with the standard library, and follows progress on the websocket
(`/ws?clientId=`) when `websocket-client` is installed, else by polling `/history`. No ComfyUI import.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GenerationInterruptedError, InferixError, WorkflowError
from ..sinks.paths import publish

log = logging.getLogger(__name__)

# ui keys whose entries are files ({"filename", "subfolder", "type"}) the server can hand back.
MAX_RESPONSE_BYTES = 64 * 2**20  # a JSON answer (object_info of a big install is a few MB)
MAX_DOWNLOAD_BYTES = 16 * 2**30  # one output file
MAX_WS_MESSAGE_CHARS = 4 * 2**20  # a progress/status message; longer ones are skipped
FILE_TYPES = ("output", "temp", "input")  # the folders ComfyUI's /view serves
FILE_KEYS = ("images", "gifs", "videos", "files", "audio", "video", "animated_images")
POLL_SECONDS = 0.5


class ServerError(InferixError):
    """The ComfyUI server is unreachable or answered something we cannot use."""


@dataclass
class PromptRun:
    """The outcome of one queued prompt."""

    prompt_id: str
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id → its ui dict
    status: str = "success"


@dataclass(frozen=True)
class ProgressEvent:
    """One progress report from the server for a node."""

    node_id: str | None
    value: int
    max: int


class ComfyClient:
    """HTTP/websocket access to one ComfyUI server, e.g. ComfyClient('http://127.0.0.1:8188')."""

    def __init__(
        self,
        server: str,
        request_timeout_s: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_download_bytes: int = MAX_DOWNLOAD_BYTES,
    ):
        if "://" not in server:
            server = "http://" + server
        self.server = server.rstrip("/")
        self.request_timeout_s = request_timeout_s
        self.max_response_bytes = max_response_bytes
        self.max_download_bytes = max_download_bytes

    # --- plain HTTP ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, limit: int | None = None) -> tuple[int, bytes]:
        """One request; the whole exchange (headers, trickled bodies) ends within `request_timeout_s`."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        chunks: list[bytes] = []
        status = self._exchange(method, path, data, headers, limit or self.max_response_bytes, chunks.append)
        return status, b"".join(chunks)

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: Mapping[str, str], limit: int, sink: Callable
    ) -> int:
        """Send one request and stream its body into `sink`, at most `limit` bytes, all within the timeout.

        Why not urlopen: its timeout is per socket operation, so a server that sends one byte every few
        seconds keeps it waiting forever. A watchdog closes the socket at the deadline instead.
        """
        url = urllib.parse.urlsplit(self.server + path)
        conn_class = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(url.hostname or "127.0.0.1", url.port, timeout=self.request_timeout_s)
        expired = threading.Event()
        opened: list[socket.socket] = []  # the response keeps the socket after conn.sock is cleared

        def expire() -> None:
            expired.set()
            for sock in opened:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.request_timeout_s, expire)
        watchdog.daemon = True
        target = url.path + (f"?{url.query}" if url.query else "")
        try:
            conn.connect()
            opened.append(conn.sock)
            watchdog.start()
            conn.request(method, target, body=data, headers=dict(headers))
            resp = conn.getresponse()
            declared = resp.getheader("Content-Length")
            if declared is not None and declared.strip().isdigit() and int(declared) > limit:
                raise ServerError(
                    f"{method} {path} answered {int(declared)} bytes, more than the {limit}-byte limit; "
                    "is --server a ComfyUI server?"
                )
            received = 0
            while chunk := resp.read1(1 << 20):
                received += len(chunk)
                if received > limit:
                    raise ServerError(
                        f"{method} {path} answered more than the {limit}-byte limit; is --server a ComfyUI server?"
                    )
                sink(chunk)
            if expired.is_set():  # the watchdog's shutdown reads as an early end of the body
                raise OSError("deadline")
            return resp.status
        except ServerError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            if expired.is_set():
                raise ServerError(
                    f"{method} {path} on {self.server} did not complete within {self.request_timeout_s:g} s "
                    "(the server is stuck or trickling its answer)"
                ) from None
            raise ServerError(
                f"cannot reach the ComfyUI server at {self.server} ({exc}). Is it running? "
                "Start it with `python main.py --listen 127.0.0.1 --port 8188`, or pass --server."
            ) from None
        finally:
            watchdog.cancel()
            conn.close()

    def _get_json(self, path: str) -> Any:
        status, raw = self._request("GET", path)
        if status != 200:
            raise ServerError(f"GET {path} answered HTTP {status}: {_snippet(raw)}")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise ServerError(f"GET {path} answered something that is not JSON: {_snippet(raw)}") from None

    def object_info(self) -> dict[str, Any]:
        """Every node type the server knows, as `/object_info` describes it."""
        info = self._get_json("/object_info")
        if not isinstance(info, dict) or not all(isinstance(v, dict) for v in info.values()):
            raise ServerError("GET /object_info did not answer a JSON object of node definitions")
        return info

    def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The history entry of `prompt_id`, or None while it has not finished."""
        answer = self._get_json(f"/history/{urllib.parse.quote(prompt_id)}")
        if not isinstance(answer, dict):
            raise ServerError(f"GET /history/{prompt_id} answered a JSON {type(answer).__name__}, not an object")
        entry = answer.get(prompt_id)
        if entry is not None and not isinstance(entry, dict):
            raise ServerError(f"GET /history/{prompt_id}: the entry is a JSON {type(entry).__name__}, not an object")
        return entry

    def interrupt(self) -> None:
        """Stop whatever the server is running now."""
        self._request("POST", "/interrupt", {})

    def submit(self, prompt: Mapping[str, Any], client_id: str) -> str:
        """Queue an API-format workflow; return its prompt id.

        Raises:
            WorkflowError: the server refused it (HTTP 400), with every node error it listed.
        """
        status, raw = self._request("POST", "/prompt", {"prompt": prompt, "client_id": client_id})
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = {}
        if status == 200 and isinstance(body, dict) and isinstance(body.get("prompt_id"), (str, int)):
            return str(body["prompt_id"])
        if status == 400 and isinstance(body, dict) and "error" in body:
            raise WorkflowError(format_validation_error(body))
        raise ServerError(f"POST /prompt answered HTTP {status}: {_snippet(raw)}")

    def download(self, entry: Mapping[str, Any], dest_dir: Path) -> Path:
        """Fetch one output file through `/view` into dest_dir/subfolder/filename; returns where it went.

        The names come from the server, so they are checked like user input: the file lands inside
        `dest_dir` or nowhere, never over an existing file (a taken name gets the next free number), and
        at most `max_download_bytes` are written.

        Raises:
            ServerError: the entry names a path outside `dest_dir`, or the download failed (nothing is kept).
        """
        dest = confined_download_path(entry, dest_dir)
        query = urllib.parse.urlencode(
            {
                "filename": entry["filename"],
                "subfolder": entry.get("subfolder") or "",
                "type": entry.get("type") or "output",
            }
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=".inferix-download-", suffix=".partial", dir=dest.parent)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                status = self._exchange("GET", f"/view?{query}", None, {}, self.max_download_bytes, out.write)
            if status != 200:
                raise ServerError(f"GET /view?{query} answered HTTP {status}")
            return publish(temp, dest)  # never replaces a file: a taken name moves on to the next number
        finally:
            if temp.exists():
                temp.unlink()

    # --- following a run -------------------------------------------------------------------------

    def connect(self, client_id: str) -> Any | None:
        """Open the progress websocket (before submitting, so no message is missed); None without websocket-client."""
        try:
            import websocket
        except ImportError:
            log.info("websocket-client is not installed; following progress by polling /history")
            return None
        url = self.server.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        try:
            return websocket.create_connection(
                f"{url}/ws?clientId={urllib.parse.quote(client_id)}", timeout=self.request_timeout_s
            )
        except Exception as exc:
            log.warning("could not open the websocket (%s); following progress by polling /history", exc)
            return None

    def wait(
        self,
        prompt_id: str,
        ws: Any | None,
        timeout_s: float | None = None,
        on_progress: Callable[[ProgressEvent], None] | None = None,
    ) -> PromptRun:
        """Block until `prompt_id` finishes; return its outputs.

        Raises:
            WorkflowError: a node failed on the server (its exception text is in the message).
            GenerationInterruptedError: the run was interrupted on the server.
            ServerError: `timeout_s` passed first.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if ws is not None:
            self._follow_websocket(prompt_id, ws, deadline, on_progress)
        while True:  # history appears once the server has finished its bookkeeping
            entry = self.history(prompt_id)
            if entry is not None:
                return self._run_from_history(prompt_id, entry)
            _check_deadline(deadline, prompt_id)
            time.sleep(POLL_SECONDS)

    def _follow_websocket(
        self, prompt_id: str, ws: Any, deadline: float | None, on_progress: Callable[[ProgressEvent], None] | None
    ) -> None:
        import websocket

        while True:
            _check_deadline(deadline, prompt_id)
            try:
                ws.settimeout(2.0)
                raw = ws.recv()
            except websocket.WebSocketTimeoutException:
                if self.history(prompt_id) is not None:
                    return  # finished while we were not looking (e.g. cached)
                continue
            except (websocket.WebSocketException, OSError) as exc:
                log.warning("websocket closed (%s); polling /history instead", exc)
                return
            if not isinstance(raw, str) or len(raw) > MAX_WS_MESSAGE_CHARS:
                continue  # binary frames are preview images
            try:
                message = json.loads(raw)
            except (ValueError, RecursionError):
                log.debug("skipping a websocket message that is not JSON: %s", raw[:80])
                continue
            if not isinstance(message, dict) or not isinstance(message.get("data") or {}, dict):
                continue
            kind, data = message.get("type"), message.get("data") or {}
            if not isinstance(data.get("prompt_id"), (str, type(None))) or data.get("prompt_id") not in (
                None,
                prompt_id,
            ):
                continue
            if kind == "progress" and on_progress is not None:
                value, total = _as_int(data.get("value")), _as_int(data.get("max"))
                if value is not None and total is not None:
                    on_progress(ProgressEvent(_as_text(data.get("node")), value, total))
            elif kind == "executing" and data.get("node") is None and data.get("prompt_id") == prompt_id:
                return
            elif kind == "execution_error":
                raise WorkflowError(format_execution_error(data), node_id=_as_text(data.get("node_id")))
            elif kind == "execution_interrupted":
                raise GenerationInterruptedError(
                    f"the run was interrupted on the server at node {_as_text(data.get('node_id'))} "
                    f"({_as_text(data.get('node_type'))})"
                )

    def _run_from_history(self, prompt_id: str, entry: Mapping[str, Any]) -> PromptRun:
        status = entry.get("status")
        status = status if isinstance(status, dict) else {}
        messages = status.get("messages")
        for message in messages if isinstance(messages, list) else []:
            if not (isinstance(message, list) and len(message) == 2 and isinstance(message[1], dict)):
                log.debug("skipping a malformed history status message: %.80r", message)
                continue
            event, data = message
            if event == "execution_error":
                raise WorkflowError(format_execution_error(data), node_id=_as_text(data.get("node_id")))
            if event == "execution_interrupted":
                raise GenerationInterruptedError(
                    f"the run was interrupted on the server at node {_as_text(data.get('node_id'))}"
                )
        outputs = entry.get("outputs")
        outputs = {str(k): v for k, v in outputs.items() if isinstance(v, dict)} if isinstance(outputs, dict) else {}
        return PromptRun(prompt_id, outputs, _as_text(status.get("status_str")) or "success")


def output_files(outputs: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(node id, file entry) for every file named in a run's ui outputs."""
    found = []
    for node_id, ui in outputs.items():
        for key, entries in ui.items():
            if key not in FILE_KEYS and not (
                isinstance(entries, list) and entries and isinstance(entries[0], Mapping) and "filename" in entries[0]
            ):
                continue
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, Mapping) and "filename" in entry:
                    found.append((node_id, dict(entry)))
    return found


def format_validation_error(body: Mapping[str, Any]) -> str:
    """One readable message from a 400 answer of POST /prompt (`error` and `node_errors`), whatever their shape."""
    error = body.get("error") or {}
    if not isinstance(error, Mapping):
        error = {"message": _as_text(error)}
    lines = [f"the server refused the workflow: {_as_text(error.get('message')) or 'invalid prompt'}"]
    node_errors = body.get("node_errors")
    node_errors = node_errors if isinstance(node_errors, Mapping) else {}
    for node_id, info in node_errors.items():
        info = info if isinstance(info, Mapping) else {"errors": [{"message": _as_text(info)}]}
        errors = info.get("errors")
        for err in errors if isinstance(errors, list) else []:
            err = err if isinstance(err, Mapping) else {"message": _as_text(err)}
            extra = err.get("extra_info")
            name = _as_text(extra.get("input_name")) if isinstance(extra, Mapping) else None
            where = f"node {_as_text(node_id)} ({_as_text(info.get('class_type'))})" + (
                f", input '{name}'" if name else ""
            )
            lines.append(f"  - {where}: {_as_text(err.get('message'))}: {_as_text(err.get('details'))}")
    if not node_errors and error.get("details"):
        lines.append(f"  {_as_text(error['details'])}")
    return "\n".join(lines)


def format_execution_error(data: Mapping[str, Any]) -> str:
    """One readable message from an `execution_error` event."""
    return (
        f"{_as_text(data.get('node_type'))} failed on the server: {_as_text(data.get('exception_type'))}: "
        f"{(_as_text(data.get('exception_message')) or '').strip()}"
    )


def confined_download_path(entry: Mapping[str, Any], dest_dir: Path) -> Path:
    """Where a server-named output file may go: inside `dest_dir`, or a ServerError saying why not."""
    filename, subfolder = entry.get("filename"), entry.get("subfolder") or ""
    kind = entry.get("type") or "output"
    described = f"{_as_text(subfolder)}/{_as_text(filename)}".lstrip("/")
    if kind not in FILE_TYPES:
        raise ServerError(
            f"the server named an output of type {_as_text(kind)!r}, not one of {list(FILE_TYPES)}; not downloaded"
        )
    if not isinstance(filename, str) or not isinstance(subfolder, str):
        raise ServerError(f"the server named an output file {described!r} that is not a file name; not downloaded")
    parts = [p for p in subfolder.replace("\\", "/").split("/") if p not in ("", ".")]
    bad = (
        not filename
        or filename in (".", "..")
        or any(c in filename for c in "/\\\x00")
        or ".." in parts
        or "\x00" in subfolder
        or subfolder.startswith(("/", "\\"))
        or any(":" in p for p in parts[:1])
    )
    root = Path(dest_dir).resolve()
    dest = (root.joinpath(*parts) / filename).resolve() if not bad else root
    if bad or root not in dest.parents:
        raise ServerError(
            f"the server named an output file {described!r} outside the output folder {root}; not downloaded"
        )
    return dest


def _snippet(raw: bytes) -> str:
    return raw[:300].decode(errors="replace")


def _as_text(value: Any) -> str | None:
    """A server-sent scalar as text for a message (None stays None; containers are cut short)."""
    if value is None:
        return None
    return value if isinstance(value, str) else repr(value)[:200]


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_deadline(deadline: float | None, prompt_id: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ServerError(
            f"prompt {prompt_id} did not finish within the timeout; it may still be running "
            "on the server (POST /interrupt stops it)"
        )
