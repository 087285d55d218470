"""FrameFolderSink numbering and no-overwrite; FrameQueue order, bound and thread hand-off."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.sinks import MultiSink
from inferix_core.sinks.frames import FrameFolderSink
from inferix_core.sinks.queue import FrameQueue


def blocks(num_blocks: int, frames: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size=(frames, 12, 20, 3), dtype=np.uint8) for _ in range(num_blocks)]


@pytest.mark.parametrize("ext", ["png", "webp"])
def test_frame_folder(tmp_path: Path, ext: str) -> None:
    data = blocks(3)
    with FrameFolderSink(tmp_path, prefix="f", ext=ext, quality=100) as sink:
        for i, block in enumerate(data):
            sink.write(block, i)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"f_{i:05d}.{ext}" for i in range(6)]
    for path, frame in zip(sink.paths, np.concatenate(data)):
        assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), frame)  # both lossless here
    with pytest.raises(ConfigError, match="never overwrites"):
        FrameFolderSink(tmp_path, prefix="f", ext=ext)


def test_queue_order_bound_and_close() -> None:
    queue = FrameQueue(max_blocks=2)
    data = blocks(3)
    for i, block in enumerate(data):
        queue.write(block, i)
    assert queue.num_dropped == 1 and len(queue) == 2
    queue.close()
    got = list(queue)
    assert [b.block_index for b in got] == [1, 2] and np.array_equal(got[1].frames, data[2])
    assert queue.get(timeout=0.01) is None


def test_queue_blocking_producer_hands_over_every_block() -> None:
    queue = FrameQueue(max_blocks=1, drop_oldest=False)
    data = blocks(20, frames=1)

    def produce() -> None:
        with queue:
            for i, block in enumerate(data):
                queue.write(block, i)

    thread = threading.Thread(target=produce)
    thread.start()
    received = [item.block_index for item in queue]
    thread.join(timeout=10)
    assert received == list(range(20)) and queue.num_dropped == 0


def test_multisink_fans_out_and_checks_layout() -> None:
    first, second = FrameQueue(), FrameQueue()
    with MultiSink([first, second]) as multi:
        multi.write(blocks(1)[0], 0)
        with pytest.raises(ShapeMismatchError):
            multi.write(np.zeros((2, 3, 12, 20), np.uint8), 1)  # channels-first is rejected
        with pytest.raises(ShapeMismatchError):
            multi.write(np.ones((2, 12, 20, 3), np.float32), 1)
    assert first.closed and second.closed and len(first) == len(second) == 1
