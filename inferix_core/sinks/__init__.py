"""Frame sinks: MP4, frame folders, in-memory queue and the live browser view, all fed one block at a time."""

from inferix_core.sinks.base import FrameSink, MultiSink, to_uint8_frames
from inferix_core.sinks.mp4 import Mp4Sink
from inferix_core.sinks.paths import unique_path

__all__ = ["FrameSink", "Mp4Sink", "MultiSink", "to_uint8_frames", "unique_path"]
