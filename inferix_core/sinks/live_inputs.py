"""The live view's input side: a bounded, thread-safe queue of validated input events (prompts, actions,
controls, pause/resume/stop, branch/pick, save) that the interactive session drains at block boundaries."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from inferix_core.controls import ControlSpec, validate_control_event
from inferix_core.errors import ConfigError

logger = logging.getLogger(__name__)

# Keys (lower-cased ``KeyboardEvent.key``) → named actions. The session maps names to model conditioning.
DEFAULT_KEY_ACTIONS: dict[str, str] = {
    "w": "forward", "arrowup": "forward", "s": "backward", "arrowdown": "backward",
    "a": "left", "arrowleft": "left", "d": "right", "arrowright": "right",
}  # fmt: skip
EVENT_TYPES = ("prompt", "action", "control", "pause", "resume", "stop", "branch", "pick", "save")  # save: the world
MAX_BRANCH_FUTURES = 4  # futures of one "branch here" (the session's limit too)
MAX_PROMPT_CHARS = 4000
MAX_QUEUED_EVENTS = 256  # inputs waiting for the next block boundary; beyond this the oldest go (never a stop)


class InputQueue:
    """Thread-safe FIFO of validated input events, in arrival order, holding at most ``max_events``.

    Each event gets a ``seq`` number (0, 1, …) so a consumer can see what it missed. When full, the oldest
    event goes to make room (an action first, then any but a stop; newest wins): a flood of posts cannot
    grow memory or push the user's real key presses behind it. ``dropped`` counts what went.
    """

    def __init__(
        self,
        actions: set[str] | None = None,
        controls: ControlSpec | None = None,
        max_events: int = MAX_QUEUED_EVENTS,
    ):
        self.actions = set(actions) if actions is not None else set(DEFAULT_KEY_ACTIONS.values())
        self.controls = controls  # keyboard/mouse models: what a "control" event may carry
        self.max_events = max_events
        self.dropped = 0
        self._events: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._next_seq = 0

    def validate(self, raw: Any) -> dict[str, Any]:
        """Return a clean copy of one event, or raise ``ConfigError`` saying what is wrong."""
        if not isinstance(raw, Mapping) or raw.get("type") not in EVENT_TYPES:
            found = raw.get("type") if isinstance(raw, Mapping) else type(raw).__name__
            raise ConfigError(f"input event type {found!r} is not one of {list(EVENT_TYPES)}.")
        event: dict[str, Any] = {"type": raw["type"]}
        if event["type"] == "prompt":
            text = raw.get("text")
            if not isinstance(text, str) or not text.strip() or len(text) > MAX_PROMPT_CHARS:
                raise ConfigError(
                    f"a prompt event needs 'text', a non-empty string of at most {MAX_PROMPT_CHARS} chars."
                )
            event["text"] = text
        elif event["type"] == "action":
            name = raw.get("name")
            if not isinstance(name, str) or name not in self.actions:
                raise ConfigError(f"action {str(name)[:80]!r} is not one of {sorted(self.actions)}.")
            event["name"] = raw["name"]
        elif event["type"] == "control":  # {"keys": [...], "mouse": [p, y], "look": [dx, dy]}
            event.update(validate_control_event(raw, self.controls))
        elif event["type"] == "branch":  # {"futures": ["a prompt", null (= the current prompt), ...]}
            futures = raw.get("futures")
            ok = isinstance(futures, list) and 1 <= len(futures) <= MAX_BRANCH_FUTURES
            if not ok or not all(f is None or (isinstance(f, str) and len(f) <= MAX_PROMPT_CHARS) for f in futures):
                raise ConfigError(
                    f"a branch event needs 'futures', a list of 1..{MAX_BRANCH_FUTURES} prompts (strings of at "
                    f"most {MAX_PROMPT_CHARS} chars; null or empty keeps the current prompt)."
                )
            event["futures"] = [f if isinstance(f, str) and f.strip() else None for f in futures]
        elif event["type"] == "pick":  # {"index": i} keeps future i; -1 keeps none
            index = raw.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or not -1 <= index < MAX_BRANCH_FUTURES:
                raise ConfigError(f"a pick event needs 'index', an integer from -1 (none) to {MAX_BRANCH_FUTURES - 1}.")
            event["index"] = index
        return event

    def put(self, raw: Any) -> dict[str, Any]:
        """Validate and append one event; returns it with its ``seq`` and arrival ``time_s``."""
        return self.put_many([raw])[0]

    def put_many(self, raws: list[Any]) -> list[dict[str, Any]]:
        """Validate all, then append all under one lock (a rejected batch adds nothing)."""
        events = [self.validate(raw) for raw in raws]
        with self._cond:
            for event in events:
                event["seq"], event["time_s"] = self._next_seq, time.perf_counter()
                self._next_seq += 1
                if len(self._events) >= self.max_events:
                    self._drop_oldest()
                self._events.append(event)
            self._cond.notify_all()
        return events

    def _drop_oldest(self) -> None:
        """Make room for one event (lock held): the oldest action, else the oldest non-stop event."""
        for wanted in ("action", None):
            for i, old in enumerate(self._events):
                if (old["type"] == wanted) if wanted else old["type"] != "stop":
                    del self._events[i]
                    self.dropped += 1
                    if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                        logger.warning("live view: input queue full, dropped %d old event(s)", self.dropped)
                    return
        self._events.popleft()  # all stops: one is as good as another

    def drain(self) -> list[dict[str, Any]]:
        """Everything queued, oldest first (what the session calls at each block boundary)."""
        with self._cond:
            events = list(self._events)
            self._events.clear()
            return events

    def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Oldest event, waiting up to ``timeout`` seconds; ``None`` on timeout (e.g. while paused)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._events, timeout):
                return None
            return self._events.popleft()

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)
