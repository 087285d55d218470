"""A small client for a running ComfyUI server: submit a workflow, follow it, fetch its outputs.

Speaks ComfyUI's HTTP API (`POST /prompt`, `GET /history/{id}`, `GET /view`, `POST /interrupt`,
`GET /object_info`) with the standard library, and follows progress on the websocket
(`/ws?clientId=`) when `websocket-client` is installed, else by polling `/history`. No ComfyUI import.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GenerationInterruptedError, InferixError, WorkflowError

log = logging.getLogger(__name__)

# ui keys whose entries are files ({"filename", "subfolder", "type"}) the server can hand back.
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

    def __init__(self, server: str, request_timeout_s: float = 30.0):
        if "://" not in server:
            server = "http://" + server
        self.server = server.rstrip("/")
        self.request_timeout_s = request_timeout_s

    # --- plain HTTP ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout_s) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(
                f"cannot reach the ComfyUI server at {self.server} ({reason}). Is it running? "
                "Start it with `python main.py --listen 127.0.0.1 --port 8188`, or pass --server."
            ) from exc

    def _get_json(self, path: str) -> Any:
        status, raw = self._request("GET", path)
        if status != 200:
            raise ServerError(f"GET {path} answered HTTP {status}: {raw[:300].decode(errors='replace')}")
        return json.loads(raw)

    def object_info(self) -> dict[str, Any]:
        """Every node type the server knows, as `/object_info` describes it."""
        return self._get_json("/object_info")

    def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The history entry of `prompt_id`, or None while it has not finished."""
        return self._get_json(f"/history/{urllib.parse.quote(prompt_id)}").get(prompt_id)

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
        except json.JSONDecodeError:
            body = {}
        if status == 200 and "prompt_id" in body:
            return str(body["prompt_id"])
        if status == 400 and isinstance(body, dict) and "error" in body:
            raise WorkflowError(format_validation_error(body))
        raise ServerError(f"POST /prompt answered HTTP {status}: {raw[:500].decode(errors='replace')}")

    def download(self, entry: Mapping[str, Any], dest_dir: Path) -> Path:
        """Fetch one output file through `/view` into dest_dir/subfolder/filename."""
        query = urllib.parse.urlencode(
            {
                "filename": entry["filename"],
                "subfolder": entry.get("subfolder", ""),
                "type": entry.get("type", "output"),
            }
        )
        dest = dest_dir / str(entry.get("subfolder") or "") / str(entry["filename"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        req = urllib.request.Request(f"{self.server}/view?{query}")
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout_s) as resp, open(dest, "wb") as out:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
        except urllib.error.HTTPError as exc:
            raise ServerError(f"GET /view?{query} answered HTTP {exc.code}") from exc
        return dest

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
            if not isinstance(raw, str):
                continue  # binary frames are preview images
            message = json.loads(raw)
            kind, data = message.get("type"), message.get("data") or {}
            if data.get("prompt_id") not in (None, prompt_id):
                continue
            if kind == "progress" and on_progress is not None:
                on_progress(ProgressEvent(data.get("node"), int(data.get("value", 0)), int(data.get("max", 0))))
            elif kind == "executing" and data.get("node") is None and data.get("prompt_id") == prompt_id:
                return
            elif kind == "execution_error":
                raise WorkflowError(format_execution_error(data), node_id=data.get("node_id"))
            elif kind == "execution_interrupted":
                raise GenerationInterruptedError(
                    f"the run was interrupted on the server at node {data.get('node_id')} ({data.get('node_type')})"
                )

    def _run_from_history(self, prompt_id: str, entry: Mapping[str, Any]) -> PromptRun:
        status = entry.get("status") or {}
        for event, data in status.get("messages") or []:
            if event == "execution_error":
                raise WorkflowError(format_execution_error(data), node_id=data.get("node_id"))
            if event == "execution_interrupted":
                raise GenerationInterruptedError(f"the run was interrupted on the server at node {data.get('node_id')}")
        return PromptRun(prompt_id, dict(entry.get("outputs") or {}), status.get("status_str", "success"))


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
    """One readable message from a 400 answer of POST /prompt (`error` and `node_errors`)."""
    error = body.get("error") or {}
    if isinstance(error, str):
        error = {"message": error}
    lines = [f"the server refused the workflow: {error.get('message', 'invalid prompt')}"]
    node_errors = body.get("node_errors") or {}
    for node_id, info in node_errors.items():
        for err in info.get("errors", []):
            name = (err.get("extra_info") or {}).get("input_name")
            where = f"node {node_id} ({info.get('class_type')})" + (f", input '{name}'" if name else "")
            lines.append(f"  - {where}: {err.get('message')}: {err.get('details')}")
    if not node_errors and error.get("details"):
        lines.append(f"  {error['details']}")
    return "\n".join(lines)


def format_execution_error(data: Mapping[str, Any]) -> str:
    """One readable message from an `execution_error` event."""
    return (
        f"{data.get('node_type')} failed on the server: {data.get('exception_type')}: "
        f"{str(data.get('exception_message', '')).strip()}"
    )


def _check_deadline(deadline: float | None, prompt_id: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ServerError(
            f"prompt {prompt_id} did not finish within the timeout; it may still be running "
            "on the server (POST /interrupt stops it)"
        )
