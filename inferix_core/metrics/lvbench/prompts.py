"""LV-Bench caption files → prompt schedules `[(start_seconds, prompt), …]` for long generation.

LV-Bench captions every 2–3 s of each source video with GPT-4o. Its caption JSON is not published yet
(Inferix `LV-Bench/README.md` leaves "LV-Bench Dataset" as TODO), so the loader accepts the shapes a
per-segment caption file takes in practice and rejects anything else with a message. Accepted:

    one video    {"video_id": "v1", "fps": 24,
                  "captions": [{"start": 0.0, "end": 2.5, "caption": "A man walks …"}, …]}
    many videos  [{"video_id": "v1", "captions": [...]}, …]   or   {"v1": [...], "v2": [...]}
    bare list    [{"start": 0.0, "caption": "…"}, …]

* the segment list may also be called "chunks", "segments", "clips" or "annotations";
* a segment's text may be "caption", "prompt", "text" or "description";
* its start may be seconds ("start", "start_time", "start_sec", "begin"), a timestamp string
  ("00:02.5", "0:00:02", or a range "00:00-00:02.5" in "timestamp"/"time"), or "start_frame" with fps;
* a list of plain strings is one caption per `segment_seconds` (LV-Bench's chunks are 2–3 s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...errors import ConfigError, MissingFileError

PromptSchedule = list[tuple[float, str]]
SEGMENT_LIST_KEYS = ("captions", "chunks", "segments", "clips", "annotations")
TEXT_KEYS = ("caption", "prompt", "text", "description")
START_KEYS = ("start", "start_time", "start_sec", "start_seconds", "begin")
STAMP_KEYS = ("timestamp", "time", "span")
ID_KEYS = ("video_id", "id", "video", "name")
DEFAULT_SEGMENT_SECONDS = 2.5


def parse_timestamp(stamp: str | float | int) -> float:
    """Seconds from 12.5, "12.5", "12.5s", "01:02.5" or "1:01:02"; a range "a-b" gives its start."""
    if isinstance(stamp, (int, float)):
        return float(stamp)
    text = str(stamp).strip()
    text = re.split(r"\s*(?:-|–|to)\s*(?=\d)", text, maxsplit=1)[0].rstrip("sS ")
    try:
        seconds = 0.0
        for part in text.split(":"):
            seconds = seconds * 60.0 + float(part)
        return seconds
    except ValueError:
        raise ConfigError(f"Cannot read a time from '{stamp}'. Use seconds (12.5) or MM:SS(.s).") from None


def _segment_start(seg: dict, index: int, fps: float | None, segment_seconds: float) -> float:
    for k in START_KEYS:
        if k in seg:
            return parse_timestamp(seg[k])
    for k in STAMP_KEYS:
        if k in seg:
            return parse_timestamp(seg[k])
    if "start_frame" in seg:
        if not fps:
            raise ConfigError(f"Segment {index} gives 'start_frame' but the file has no 'fps'.")
        return float(seg["start_frame"]) / fps
    return index * segment_seconds


def _segment_text(seg: Any, index: int) -> str:
    if isinstance(seg, str):
        return seg.strip()
    for k in TEXT_KEYS:
        if isinstance(seg.get(k), str):
            return seg[k].strip()
    raise ConfigError(f"Segment {index} has no caption; expected one of {list(TEXT_KEYS)}, found {sorted(seg)}.")


def schedule_from_segments(
    segments: list, fps: float | None = None, segment_seconds: float = DEFAULT_SEGMENT_SECONDS
) -> PromptSchedule:
    """[(start_seconds, prompt)] sorted by start, from one video's list of caption segments."""
    schedule = []
    for i, seg in enumerate(segments):
        if not isinstance(seg, (str, dict)):
            raise ConfigError(f"Segment {i} is a {type(seg).__name__}; expected an object or a string.")
        start = i * segment_seconds if isinstance(seg, str) else _segment_start(seg, i, fps, segment_seconds)
        schedule.append((start, _segment_text(seg, i)))
    schedule.sort(key=lambda s: s[0])
    return schedule


def _video_entry(entry: dict) -> tuple[list, float | None] | None:
    """(segments, fps) when `entry` is one video's object, else None."""
    for k in SEGMENT_LIST_KEYS:
        if isinstance(entry.get(k), list):
            return entry[k], entry.get("fps")
    return None


def load_prompt_schedules(
    path: str | Path, segment_seconds: float = DEFAULT_SEGMENT_SECONDS
) -> dict[str, PromptSchedule]:
    """Every video's prompt schedule in an LV-Bench caption JSON, keyed by video id (file stem if none)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"LV-Bench caption file '{path}' not found.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"'{path}' is not valid JSON ({exc}).") from None
    schedules: dict[str, PromptSchedule] = {}

    def add(vid: str, segments: list, fps: float | None) -> None:
        schedules[vid] = schedule_from_segments(segments, fps, segment_seconds)

    def vid_of(entry: dict, default: str) -> str:
        return next((str(entry[k]) for k in ID_KEYS if k in entry), default)

    if isinstance(data, dict) and _video_entry(data) is not None:
        add(vid_of(data, path.stem), *_video_entry(data))
    elif isinstance(data, list) and data and all(isinstance(e, dict) and _video_entry(e) for e in data):
        for i, entry in enumerate(data):
            add(vid_of(entry, f"{path.stem}_{i}"), *_video_entry(entry))
    elif isinstance(data, list):
        add(path.stem, data, None)
    elif isinstance(data, dict) and data and all(isinstance(v, (list, dict)) for v in data.values()):
        for vid, v in data.items():
            entry = _video_entry(v) if isinstance(v, dict) else (v, None)
            if entry is None:
                raise ConfigError(f"'{path}': video '{vid}' has none of {list(SEGMENT_LIST_KEYS)}.")
            add(str(vid), *entry)
    else:
        raise ConfigError(
            f"'{path}' is not an LV-Bench caption file; see inferix_core/metrics/lvbench/prompts.py "
            "for the accepted shapes."
        )
    return schedules


def load_prompt_schedule(
    path: str | Path, video_id: str | None = None, segment_seconds: float = DEFAULT_SEGMENT_SECONDS
) -> PromptSchedule:
    """One video's prompt schedule; `video_id` is required when the file holds several videos."""
    schedules = load_prompt_schedules(path, segment_seconds)
    if video_id is None:
        if len(schedules) != 1:
            raise ConfigError(
                f"'{path}' holds {len(schedules)} videos; pass video_id (e.g. '{next(iter(schedules))}')."
            )
        return next(iter(schedules.values()))
    if video_id not in schedules:
        raise ConfigError(f"Video '{video_id}' is not in '{path}'; it has {sorted(schedules)[:5]}….")
    return schedules[video_id]
