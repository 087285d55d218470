"""One file mode for every output (issue #52): world states were 0600 (safetensors writes so), videos 0644.

Everything a node or the queue client publishes goes through `publish`, which gives the file 0666 less the
umask (0644 under the usual 022), whatever mode its writer created it with.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from inferix_core.sinks.paths import OUTPUT_MODE, publish


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_world_states_downloads_and_videos_are_published_with_one_mode(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    assert 0o666 & ~mask == OUTPUT_MODE
    world = tmp_path / ".world.partial.safetensors"
    save_file({"k": torch.zeros(2)}, str(world))  # how write_world_state writes (0600 from safetensors)
    fd, download = tempfile.mkstemp(dir=tmp_path)  # how the queue client downloads (0600 from mkstemp)
    os.close(fd)
    video = tmp_path / ".clip.partial.mp4"
    with open(video, "xb") as f:  # how the mp4 sink writes (0666 less the umask)
        f.write(b"x")
    published = [
        publish(world, tmp_path / "world_00001.safetensors"),
        publish(Path(download), tmp_path / "image.png"),
        publish(video, tmp_path / "clip_00001.mp4"),
    ]
    assert {mode(p) for p in published} == {OUTPUT_MODE}
