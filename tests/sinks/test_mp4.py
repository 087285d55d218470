"""Mp4Sink: flushed per block (SIGKILL keeps every finished block), exception path publishes, no overwrite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.sinks import Mp4Sink, unique_path
from inferix_core.sinks.paths import partial_path, publish

BLOCK_FRAMES = 3


def decode_frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def random_block(rng: np.random.Generator, height: int = 48, width: int = 64) -> np.ndarray:
    # smooth content (random per-block colour gradient) so crf quality is meaningful; never zeros
    ramp = np.linspace(0.0, 1.0, width)[None, :, None] * np.linspace(0.5, 1.0, height)[:, None, None]
    colour = rng.uniform(40, 215, size=(1, 1, 3))
    frame = np.clip(colour * (0.5 + ramp), 0, 255).astype(np.uint8)
    return np.repeat(frame[None], BLOCK_FRAMES, axis=0)


def test_exception_path_publishes_playable_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = unique_path(tmp_path, "clip", "mp4")
    blocks = [random_block(rng) for _ in range(3)]
    with pytest.raises(KeyboardInterrupt), Mp4Sink(path, fps=16) as sink:
        for i, block in enumerate(blocks):
            sink.write(block, i)
        raise KeyboardInterrupt
    assert sink.path == path and path.exists() and not partial_path(path).exists()
    frames = decode_frames(path)
    assert len(frames) == 3 * BLOCK_FRAMES
    expected = np.concatenate(blocks)
    assert np.abs(frames[-1].astype(int) - expected[-1]).mean() < 4.0  # crf 18, smooth content


def test_odd_size_is_padded_and_torch_accepted(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    with Mp4Sink(tmp_path / "odd.mp4", fps=24) as sink:
        sink.write(torch.from_numpy(random_block(rng, 33, 45)), 0)
        with pytest.raises(ShapeMismatchError):
            sink.write(random_block(rng, 32, 44), 1)
    frames = decode_frames(tmp_path / "odd.mp4")
    assert len(frames) == BLOCK_FRAMES and frames[0].shape == (34, 46, 3)
    with av.open(str(tmp_path / "odd.mp4")) as container:
        assert container.streams.video[0].average_rate == 24


def test_never_overwrites(tmp_path: Path) -> None:
    existing = tmp_path / "clip.mp4"
    existing.write_bytes(b"keep me")
    with pytest.raises(ConfigError, match="never overwrites"):
        Mp4Sink(existing)
    assert unique_path(tmp_path, "clip", "mp4").name == "clip_00001.mp4"
    (tmp_path / "clip_00007.partial.mp4").write_bytes(b"")
    assert unique_path(tmp_path, "clip", ".mp4").name == "clip_00008.mp4"
    # a name taken while writing moves the output to the next free number
    temp = tmp_path / "x.partial.mp4"
    temp.write_bytes(b"new")
    assert publish(temp, existing) == tmp_path / "clip_00008.mp4"
    assert existing.read_bytes() == b"keep me"


def test_no_frames_leaves_no_file(tmp_path: Path) -> None:
    with Mp4Sink(tmp_path / "empty.mp4"):
        pass
    assert list(tmp_path.iterdir()) == []


WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from inferix_core.sinks import Mp4Sink
    sink = Mp4Sink(sys.argv[1], fps=16)
    rng = np.random.default_rng(0)
    for i in range(int(sys.argv[2])):
        sink.write(rng.integers(16, 240, size=(3, 48, 64, 3), dtype=np.uint8), i)
        print(sink.frames_written, flush=True)
    time.sleep(600)  # killed here, mid-run, before close()
    """
)


def test_sigkill_midway_keeps_every_flushed_block(tmp_path: Path) -> None:
    path = tmp_path / "killed.mp4"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "4"], stdout=subprocess.PIPE, text=True)
    try:
        reported = [int(proc.stdout.readline()) for _ in range(4)]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert reported == [3, 6, 9, 12]
    assert not path.exists() and partial_path(path).exists()
    assert len(decode_frames(partial_path(path))) == reported[-1]
