"""Frame sinks: MP4, frame folders, in-memory queue and the live browser view, all fed one block at a time."""

from inferix_core.sinks.base import FrameSink, MultiSink, to_uint8_frames
from inferix_core.sinks.frames import FrameFolderSink
from inferix_core.sinks.live import InputQueue, LiveView
from inferix_core.sinks.mp4 import Mp4Sink
from inferix_core.sinks.paths import unique_path
from inferix_core.sinks.queue import FrameBlock, FrameQueue

__all__ = [
    "FrameBlock", "FrameFolderSink", "FrameQueue", "FrameSink", "InputQueue", "LiveView", "Mp4Sink", "MultiSink",
    "to_uint8_frames", "unique_path",
]  # fmt: skip
