"""Live keyboard/mouse control of a running Block Denoise from ComfyUI's page (web_ext/inferix_live.js).

While Block Denoise runs an image-started keyboard/mouse model (Matrix-Game 2.0) without an Action
Schedule, it opens a `ControlChannel` under its node id; the page POSTs control events to
`/inferix/control` ({"node": id, "events": [{"type": "control", "keys": [...], "look": [dx, dy]}]}),
and each block boundary applies what arrived (`inferix_core.controls.LiveControls`). Bodies are capped,
the inbox is bounded, and a node that is not running answers 404. The route is registered only inside
ComfyUI (PromptServer); headless runs have nothing to steer.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from inferix_core.controls import ControlChannel, ControlSpec, validate_control_event
from inferix_core.errors import ConfigError

log = logging.getLogger(__name__)

ROUTE = "/inferix/control"
MAX_BODY_BYTES = 16 * 1024
MAX_EVENTS_PER_POST = 64

_channels: dict[str, ControlChannel] = {}
_lock = threading.Lock()


@contextmanager
def open_channel(node_id: str, spec: ControlSpec) -> Iterator[ControlChannel]:
    """A channel for `node_id` while the run lasts (a second run of the same node replaces it)."""
    channel = ControlChannel(spec)
    with _lock:
        _channels[str(node_id)] = channel
    try:
        yield channel
    finally:
        with _lock:
            if _channels.get(str(node_id)) is channel:
                del _channels[str(node_id)]


def handle(body: bytes) -> tuple[int, dict[str, Any]]:
    """One POST body → (HTTP status, JSON reply); events reach the channel only if all of them are valid."""
    if len(body) > MAX_BODY_BYTES:
        return 413, {"error": f"body of {len(body)} bytes exceeds {MAX_BODY_BYTES}"}
    try:
        payload = json.loads(body or b"null")
    except ValueError as exc:
        return 400, {"error": f"not JSON: {exc}"}
    if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
        return 400, {"error": 'send {"node": "<id>", "events": [{"type": "control", ...}]}'}
    events = payload["events"]
    if len(events) > MAX_EVENTS_PER_POST or any(not isinstance(e, dict) or e.get("type") != "control" for e in events):
        return 400, {"error": f"events must be at most {MAX_EVENTS_PER_POST} objects of type 'control'"}
    with _lock:
        channel = _channels.get(str(payload.get("node")))
    if channel is None:
        return 404, {"error": f"node {payload.get('node')!r} is not running a keyboard/mouse model"}
    try:
        for event in events:  # all or none: check every event before queueing any
            validate_control_event(event, channel.spec)
    except ConfigError as exc:
        return 400, {"error": str(exc)}
    try:
        for event in events:
            channel.put(event)
    except ConfigError as exc:  # the inbox is full: the run is behind
        return 429, {"error": str(exc)}
    return 200, {"accepted": len(events)}


def register_route() -> bool:
    """Add POST /inferix/control to ComfyUI's server; False outside ComfyUI."""
    try:
        from aiohttp import web
        from server import PromptServer
    except ImportError:
        return False
    instance = getattr(PromptServer, "instance", None)
    if instance is None:
        return False

    @instance.routes.post(ROUTE)
    async def control(request: Any) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return web.json_response({"error": f"body exceeds {MAX_BODY_BYTES} bytes"}, status=413)
        status, reply = handle(await request.content.read(MAX_BODY_BYTES + 1))
        return web.json_response(reply, status=status)

    log.debug("registered %s", ROUTE)
    return True


__all__ = ["ROUTE", "handle", "open_channel", "register_route"]
