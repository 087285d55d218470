"""Keyboard and mouse controls of per-pixel-frame action models (Matrix-Game 2.0), as action rows.

Matrix-Game 2.0 is conditioned per **pixel** frame: a keyboard row (multi-hot, or one-hot for
TempleRun) and a mouse row (pitch, yaw: per-frame camera deltas) for each of the 1 + 4·(F − 1)
video frames of F latent frames. The block that starts at latent frame s with n frames reads the rows
[0, 1 + 4·(s + n − 1)); its *new* rows are the last 1 + 4·(n − 1) of them for the first block and the
last 4·n later (`block_rows`). The authors' streaming demo (`CausalInferenceStreamingPipeline`,
`pipeline/causal_inference.py` of Matrix-Game-2 at 3ceb3114) writes the current key/mouse state into
those new rows before each block; `ActionTrack` does the same.

Key layouts come from the authors' `get_current_action` (the demo's key maps) and `utils/conditions.py`
(the channel order of each variant). This module is framework-free; the session, the schedules, the
live page and the nodes all build rows through it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import ConfigError, ShapeMismatchError

log = logging.getLogger(__name__)

CAM_VALUE = 0.1  # the camera delta of the authors' demos and action benchmarks
MAX_LOOK_PX = 100_000.0  # one event's pointer movement is bounded (a malformed client cannot overflow a row)


@dataclass(frozen=True)
class ControlSpec:
    """One variant's controls: keyboard channels in model order, the keys that press them, the mouse.

    Attributes:
        variant: the authors' `mode` (universal, gta_drive, templerun).
        channels: keyboard channel names, in the model's channel order.
        keys: keyboard key (upper case) → channel name.
        one_hot: exactly one channel per row (TempleRun); with no key held the `idle` channel is on.
        idle: the one-hot channel of "no key" (TempleRun's nomove).
        mouse: the model takes a mouse track.
        camera_keys: keys that turn the camera: key → (pitch, yaw) added to every new row while held.
        look_pitch: pointer movement up/down changes pitch (False for GTA-drive, trained on yaw only).
        mouse_limit: |pitch|, |yaw| of a row are clamped to this (the demos use ±0.1).
        look_sensitivity: model units of total camera turn per pointer pixel (a block's turn is spread
            over its new rows, so the camera turns as far as the pointer moved).
    """

    variant: str
    channels: tuple[str, ...]
    keys: Mapping[str, str]
    one_hot: bool = False
    idle: str | None = None
    mouse: bool = True
    camera_keys: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    look_pitch: bool = True
    mouse_limit: float = 2 * CAM_VALUE
    look_sensitivity: float = 0.004

    def __post_init__(self) -> None:
        unknown = sorted(set(self.keys.values()) - set(self.channels))
        if unknown or (self.one_hot and self.idle not in self.channels):
            raise ConfigError(f"control spec {self.variant}: keys map to unknown channels {unknown} or no idle channel")

    @property
    def keyboard_dim(self) -> int:
        return len(self.channels)

    @property
    def all_keys(self) -> tuple[str, ...]:
        """Every key the live page should send: channel keys, then camera keys."""
        return tuple(self.keys) + tuple(k for k in self.camera_keys if k not in self.keys)

    def describe_keys(self) -> str:
        parts = [f"{k} {c}" for k, c in self.keys.items()]
        parts += [f"{k} camera {'up' if p > 0 else 'down' if p < 0 else 'left' if y < 0 else 'right'}"
                  for k, (p, y) in self.camera_keys.items()]  # fmt: skip
        return ", ".join(parts)

    def page_config(self) -> dict[str, Any]:
        """What the live page needs to send controls (JSON-able)."""
        return {"variant": self.variant, "keys": dict(self.keys), "camera_keys": list(self.camera_keys),
                "mouse": self.mouse, "look_pitch": self.look_pitch, "one_hot": self.one_hot}  # fmt: skip


# The authors' demo key maps (pipeline/causal_inference.py, get_current_action) and channel orders
# (utils/conditions.py KEYBOARD_IDX): universal W/S/A/D move, I/K/J/L turn the camera; GTA-drive
# W/S drive and A/D steer through the mouse yaw; TempleRun's seven one-hot actions.
CONTROL_SPECS: dict[str, ControlSpec] = {
    "universal": ControlSpec(
        "universal",
        ("forward", "back", "left", "right"),
        {"W": "forward", "S": "back", "A": "left", "D": "right"},
        camera_keys={"I": (CAM_VALUE, 0.0), "K": (-CAM_VALUE, 0.0), "J": (0.0, -CAM_VALUE), "L": (0.0, CAM_VALUE)},
    ),
    "gta_drive": ControlSpec(
        "gta_drive",
        ("forward", "back"),
        {"W": "forward", "S": "back"},
        camera_keys={"A": (0.0, -CAM_VALUE), "D": (0.0, CAM_VALUE)},
        look_pitch=False,
    ),
    "templerun": ControlSpec(
        "templerun",
        ("nomove", "jump", "slide", "turnleft", "turnright", "leftside", "rightside"),
        {
            "W": "jump",
            "S": "slide",
            "A": "leftside",
            "D": "rightside",
            "Z": "turnleft",
            "C": "turnright",
            "Q": "nomove",
        },
        one_hot=True,
        idle="nomove",
        mouse=False,
    ),
}


def get_control_spec(variant: str | ControlSpec) -> ControlSpec:
    if isinstance(variant, ControlSpec):
        return variant
    if variant not in CONTROL_SPECS:
        raise ConfigError(f"unknown control variant {variant!r}; expected one of {list(CONTROL_SPECS)}")
    return CONTROL_SPECS[variant]


def control_spec_of(world_model: Any) -> ControlSpec | None:
    """The controls of a world model with per-pixel-frame actions, else None (named-action or text models).

    Read from the model handle's `control_variant` (a CONTROL_SPECS name or a ControlSpec) or the
    Matrix-Game variant name the loader sets (`WorldModel.variant`: universal, gta_drive, templerun).
    """
    variant = getattr(world_model, "control_variant", None) or getattr(world_model, "variant", None) or None
    return None if variant is None else get_control_spec(variant)


def block_rows(start_frame: int, num_frames: int, stride: int = 4) -> tuple[int, int]:
    """The new action rows [lo, hi) of the block at latent frame `start_frame` with `num_frames` frames.

    The block reads rows [0, hi); rows before lo were written by earlier blocks.
    """
    if start_frame < 0 or num_frames < 1:
        raise ConfigError(f"a block needs start_frame >= 0 and num_frames >= 1, got {start_frame}, {num_frames}")
    hi = 1 + stride * (start_frame + num_frames - 1)
    lo = 0 if start_frame == 0 else 1 + stride * (start_frame - 1)
    return lo, hi


def num_pixel_frames(num_latent_frames: int, stride: int = 4) -> int:
    """Rows of a run of F latent frames: 1 + 4·(F − 1)."""
    return 1 + stride * (num_latent_frames - 1)


@dataclass(frozen=True)
class Control:
    """One control state: the keys held and the per-frame mouse (pitch, yaw) on top of the camera keys."""

    keys: tuple[str, ...] = ()
    mouse: tuple[float, float] = (0.0, 0.0)


def _finite_pair(value: Any, what: str) -> tuple[float, float]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise ConfigError(f"{what} must be two numbers [pitch, yaw], got {value!r}")
    try:
        pair = (float(value[0]), float(value[1]))
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be two numbers [pitch, yaw], got {value!r}") from None
    if not all(math.isfinite(v) for v in pair):
        raise ConfigError(f"{what} must be finite, got {value!r}")
    return pair


def normalize_keys(spec: ControlSpec, keys: Iterable[Any]) -> tuple[str, ...]:
    """Key names → upper-case keys of `spec`, in order, without repeats; channel names are accepted too.

    "w", "W", "forward" all mean W for universal; "none" (or "-") alone means no key.
    """
    by_channel = {c: k for k, c in spec.keys.items()}
    out: list[str] = []
    for raw in keys:
        if not isinstance(raw, str):
            raise ConfigError(f"keys must be strings such as 'W', got {raw!r}")
        name = raw.strip()
        if name.lower() in ("none", "-", ""):
            continue
        key = (
            name.upper()
            if name.upper() in spec.keys or name.upper() in spec.camera_keys
            else by_channel.get(name.lower())
        )
        if key is None:
            raise ConfigError(
                f"key {raw!r} is not a {spec.variant} control; use {', '.join(spec.all_keys)} ({spec.describe_keys()})"
            )
        if key not in out:
            out.append(key)
    return tuple(out)


def control_row(spec: ControlSpec, control: Control, extra_mouse: tuple[float, float] = (0.0, 0.0)):
    """(keyboard row [K], mouse row [2] or None) of one control state.

    Multi-hot over the held keys' channels (one-hot: the last held key, else the idle channel); mouse
    = held value + camera keys + `extra_mouse`, each axis clamped to ±spec.mouse_limit.
    """
    keyboard = torch.zeros(spec.keyboard_dim)
    channels = [spec.keys[k] for k in control.keys if k in spec.keys]
    if spec.one_hot:
        channels = channels[-1:] or [spec.idle]
    for c in channels:
        keyboard[spec.channels.index(c)] = 1.0
    if not spec.mouse:
        return keyboard, None
    pitch, yaw = control.mouse[0] + extra_mouse[0], control.mouse[1] + extra_mouse[1]
    for k in control.keys:
        dp, dy = spec.camera_keys.get(k, (0.0, 0.0))
        pitch, yaw = pitch + dp, yaw + dy
    lim = spec.mouse_limit
    return keyboard, torch.tensor([min(max(pitch, -lim), lim), min(max(yaw, -lim), lim)])


_PAIR = re.compile(r"^(pitch|yaw)\s*=\s*(\S+)$", re.IGNORECASE)


def parse_control(spec: ControlSpec, text: str) -> Control:
    """A schedule value → Control: keys separated by spaces, '+' or ',', plus `pitch=` / `yaw=`.

    Examples: "W", "W+A yaw=0.1", "S pitch=-0.05", "none", "jump" (a channel name).
    """
    keys: list[str] = []
    mouse = [0.0, 0.0]
    for token in _tokens(text):
        match = _PAIR.match(token)
        if match:
            try:
                value = float(match.group(2))
            except ValueError:
                raise ConfigError(f"'{token}' in '{text}': {match.group(1)} must be a number") from None
            if not math.isfinite(value):
                raise ConfigError(f"'{token}' in '{text}': {match.group(1)} must be finite")
            mouse[0 if match.group(1).lower() == "pitch" else 1] = value
        else:
            keys.append(token)
    if (mouse[0] or mouse[1]) and not spec.mouse:
        raise ConfigError(f"'{text}': the {spec.variant} model takes no mouse; drop pitch= / yaw=")
    return Control(normalize_keys(spec, keys), (mouse[0], mouse[1]))


def _tokens(text: str) -> list[str]:
    """Split on spaces, '+' and ',' but keep `name = value` together."""
    text = re.sub(r"\s*=\s*", "=", text.strip())
    return [t for t in re.split(r"[\s,+]+", text) if t]


@dataclass(frozen=True)
class PixelFrameActions:
    """Action rows a block reads: keyboard [B, T, K] and mouse [B, T, 2] (None without a mouse)."""

    keyboard: torch.Tensor
    mouse: torch.Tensor | None

    @property
    def num_rows(self) -> int:
        return self.keyboard.shape[1]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> PixelFrameActions:
        return PixelFrameActions(
            self.keyboard.to(device, dtype), None if self.mouse is None else self.mouse.to(device, dtype)
        )


class ActionTrack:
    """Keyboard and mouse rows per pixel frame, written block by block (what a run or a session feeds).

    `write_block` fills a block's new rows with one control state, as the authors' streaming demo
    does; `set_rows` writes arbitrary rows (a per-frame script); `for_block` returns the prefix the
    block reads. Rows must be written in order: a block's new rows start where the track ends.
    """

    def __init__(self, spec: ControlSpec, stride: int = 4):
        self.spec = spec
        self.stride = stride
        self._keyboard: list[torch.Tensor] = []  # [rows, K] chunks
        self._mouse: list[torch.Tensor] = []
        self._rows = 0
        self.block_controls: list[Control] = []  # each written block's keys and the mouse row it got, in order

    def __len__(self) -> int:
        return self._rows

    def set_rows(self, keyboard: torch.Tensor, mouse: torch.Tensor | None = None) -> None:
        """Append rows: keyboard [T, K] (or [1, T, K]), mouse [T, 2] (required iff the spec has a mouse)."""
        keyboard = keyboard[0] if keyboard.dim() == 3 else keyboard
        mouse = mouse[0] if mouse is not None and mouse.dim() == 3 else mouse
        if keyboard.dim() != 2 or keyboard.shape[1] != self.spec.keyboard_dim:
            raise ShapeMismatchError(
                f"keyboard rows must be [T, {self.spec.keyboard_dim}] for {self.spec.variant}, got {list(keyboard.shape)}"
            )
        if self.spec.mouse != (mouse is not None):
            raise ConfigError(f"the {self.spec.variant} model {'needs' if self.spec.mouse else 'takes no'} mouse rows")
        if mouse is not None and tuple(mouse.shape) != (keyboard.shape[0], 2):
            raise ShapeMismatchError(f"mouse rows must be [{keyboard.shape[0]}, 2], got {list(mouse.shape)}")
        if not torch.isfinite(keyboard).all() or (mouse is not None and not torch.isfinite(mouse).all()):
            raise ConfigError("action rows must be finite")
        self._keyboard.append(keyboard.detach().float().cpu())
        if mouse is not None:
            self._mouse.append(mouse.detach().float().cpu())
        self._rows += keyboard.shape[0]

    def write_block(self, start_frame: int, num_frames: int, control: Control, extra_mouse=(0.0, 0.0)) -> None:
        """Fill the new rows of the block at `start_frame` with one control state."""
        lo, hi = block_rows(start_frame, num_frames, self.stride)
        if lo != self._rows:
            raise ConfigError(
                f"the block at latent frame {start_frame} writes rows from {lo}, but the track has {self._rows} rows; "
                "write blocks in order"
            )
        keyboard, mouse = control_row(self.spec, control, extra_mouse)
        self.set_rows(keyboard.expand(hi - lo, -1), None if mouse is None else mouse.expand(hi - lo, -1))
        written = (0.0, 0.0) if mouse is None else (float(mouse[0]), float(mouse[1]))
        self.block_controls.append(Control(control.keys, written))

    def rows(self, end: int | None = None) -> PixelFrameActions:
        """Rows [0, end) as [1, T, ·] tensors (all rows by default)."""
        end = self._rows if end is None else end
        if end > self._rows:
            raise ConfigError(f"asked for {end} action rows; the track has {self._rows}")
        if len(self._keyboard) > 1:  # consolidate once, so repeated reads do not re-concatenate
            self._keyboard = [torch.cat(self._keyboard)]
            self._mouse = [torch.cat(self._mouse)] if self._mouse else []
        keyboard = self._keyboard[0][:end] if self._keyboard else torch.zeros(0, self.spec.keyboard_dim)
        mouse = None
        if self.spec.mouse:
            mouse = self._mouse[0][:end] if self._mouse else torch.zeros(0, 2)
        return PixelFrameActions(keyboard.unsqueeze(0), None if mouse is None else mouse.unsqueeze(0))

    def for_block(self, start_frame: int, num_frames: int) -> PixelFrameActions:
        """The rows the block at `start_frame` reads: [0, 1 + 4·(start_frame + num_frames − 1))."""
        return self.rows(block_rows(start_frame, num_frames, self.stride)[1])


class LiveControls:
    """The controls a person is giving right now, turned into one state per block at each boundary.

    Events (the live page's `control` messages, or `InteractiveSession.control`) update it between
    boundaries; `take_block` returns the state for the next block and starts a new interval:

    * keys: the keys held now, plus every key pressed since the last boundary (a tap shorter than a
      block still counts; a key released since then does not). One-hot variants take the last key
      pressed.
    * mouse: the held per-frame value (`mouse`), plus the pointer movement (`look`, in pixels) of the
      interval spread over the block's new rows: the camera turns look · look_sensitivity in total over
      the block, in the direction the pointer moved (up = pitch up, right = yaw right).
    """

    def __init__(self, spec: ControlSpec):
        self.spec = spec
        self.held: tuple[str, ...] = ()
        self._touched: list[str] = []
        self.mouse: tuple[float, float] = (0.0, 0.0)
        self._look = [0.0, 0.0]  # pointer pixels (dx right, dy down) since the last boundary

    def apply(self, event: Mapping[str, Any]) -> None:
        """One validated `control` event: {"keys": [...]} and/or {"mouse": [p, y]} and/or {"look": [dx, dy]}."""
        if "keys" in event:
            keys = normalize_keys(self.spec, event["keys"])
            self._touched += [k for k in keys if k not in self.held and k not in self._touched]  # pressed now
            self.held = keys
        if "mouse" in event:
            self.mouse = _finite_pair(event["mouse"], "mouse")
        if "look" in event:
            dx, dy = _finite_pair(event["look"], "look")
            self._look[0] += dx
            self._look[1] += dy

    def take_block(self, new_rows: int) -> tuple[Control, tuple[float, float]]:
        """(state, extra per-frame mouse from the pointer) for a block with `new_rows` new rows; resets the interval."""
        keys = self.held + tuple(k for k in self._touched if k not in self.held)
        if self.spec.one_hot:  # the last key pressed that is still down, else the last one tapped
            keys = self.held[-1:] or tuple(self._touched[-1:])
        dx, dy = self._look
        s = self.spec.look_sensitivity / max(new_rows, 1)
        extra = ((-dy * s) if self.spec.look_pitch else 0.0, dx * s) if self.spec.mouse else (0.0, 0.0)
        self._touched = []
        self._look = [0.0, 0.0]
        return Control(keys, self.mouse), extra


class ControlChannel:
    """A bounded, thread-safe inbox of control events for a run that is steered live (e.g. from ComfyUI's page).

    Producers `put` validated events (a full inbox refuses new ones: the producer is told to slow down);
    the run calls `take_block` at each block boundary, which applies everything queued, in order, to
    its `LiveControls` and returns the block's state.
    """

    def __init__(self, spec: ControlSpec, max_events: int = 1024):
        import threading
        from collections import deque

        self.spec = spec
        self.live = LiveControls(spec)
        self.max_events = max_events
        self._events: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()

    def put(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        event = validate_control_event(raw, self.spec)
        with self._lock:
            if len(self._events) >= self.max_events:
                raise ConfigError(f"{self.max_events} control events are waiting for the next block; send fewer")
            self._events.append(event)
        return event

    def take_block(self, new_rows: int) -> tuple[Control, tuple[float, float]]:
        with self._lock:
            events, self._events = list(self._events), type(self._events)()
        for event in events:
            self.live.apply(event)
        return self.live.take_block(new_rows)


def validate_control_event(raw: Mapping[str, Any], spec: ControlSpec | None) -> dict[str, Any]:
    """The fields of a `control` input event, checked: keys (≤ 16 strings), mouse [p, y], look [dx, dy].

    Raises ConfigError (the live server answers 400) on anything else, or when the model has no controls.
    """
    if spec is None:
        raise ConfigError("this model takes no keyboard/mouse controls; send 'action' events with its action names")
    event: dict[str, Any] = {}
    if "keys" in raw:
        keys = raw["keys"]
        if not isinstance(keys, list) or len(keys) > 16:
            raise ConfigError("'keys' must be a list of at most 16 key names such as ['W', 'A']")
        event["keys"] = list(normalize_keys(spec, keys))
    if "mouse" in raw:
        event["mouse"] = list(_finite_pair(raw["mouse"], "mouse"))
    if "look" in raw:
        look = _finite_pair(raw["look"], "look")
        if max(abs(look[0]), abs(look[1])) > MAX_LOOK_PX:
            raise ConfigError(f"'look' moves at most {MAX_LOOK_PX:g} pixels per event, got {list(look)}")
        event["look"] = list(look)
    if (event.get("mouse") or event.get("look")) and not spec.mouse:
        raise ConfigError(f"the {spec.variant} model takes no mouse; send keys only")
    if not event:
        raise ConfigError("a control event needs 'keys', 'mouse' or 'look'")
    return event


__all__ = [
    "CONTROL_SPECS",
    "ActionTrack",
    "Control",
    "ControlChannel",
    "ControlSpec",
    "LiveControls",
    "PixelFrameActions",
    "block_rows",
    "control_row",
    "control_spec_of",
    "get_control_spec",
    "normalize_keys",
    "num_pixel_frames",
    "parse_control",
    "validate_control_event",
]
