"""filename_prefix and output folders (issue #20, items 4 and 7): nothing is written outside the output folder.

`.` and `inferix/..` used to resolve to the output folder itself, whose parent then received the file.
"""

from __future__ import annotations

import os

import pytest

from inferix_core.errors import ConfigError
from inferix_core.sinks import paths


def confine_prefix(root, prefix):
    return paths.confine_prefix(root, prefix)


def make_output_dir(folder):
    return paths.make_output_dir(folder)


unique_path = paths.unique_path

ESCAPES = [
    ".",
    "./",
    "..",
    "inferix/..",
    "inferix/../..",
    "a/b/../../..",
    "../video",
    "/etc/video",
    "/tmp/x/video",
    "C:\\video",
    "C:video",
    "\\\\server\\share\\video",
    "",
    "   ",
    "vid\x00eo",
]


@pytest.mark.parametrize("prefix", ESCAPES)
def test_prefix_escapes_are_refused_in_one_line(tmp_path, prefix):
    root = tmp_path / "out"
    root.mkdir()
    with pytest.raises(ConfigError) as info:
        confine_prefix(root, prefix)
    assert "\n" not in str(info.value) and "filename_prefix" in str(info.value)


def test_symlinked_folder_out_of_the_output_folder_is_refused(tmp_path):
    root, outside = tmp_path / "out", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "link")
    with pytest.raises(ConfigError, match="outside the output folder"):
        confine_prefix(root, "link/video")


@pytest.mark.parametrize(("prefix", "folder", "name"), [("video", "", "video"), ("inferix/clip", "inferix", "clip"),
                                                        ("a/./b/../clip", "a", "clip"), ("inferix/", "", "inferix")])  # fmt: skip
def test_relative_prefixes_stay_inside(tmp_path, prefix, folder, name):
    root = (tmp_path / "out").resolve()
    root.mkdir()
    got_folder, got_name = confine_prefix(root, prefix)
    assert (got_folder, got_name) == (root / folder if folder else root, name)


@pytest.mark.parametrize("prefix", [".", "inferix/..", "/tmp/evil"])
def test_stream_nodes_refuse_escaping_prefixes(tmp_path, monkeypatch, prefix):
    from inferix_nodes import comfy_runtime as rt
    from inferix_nodes.stream_out import InferixStreamOut
    from inferix_nodes.stream_settings import InferixStreamSettings

    monkeypatch.setattr(rt, "folder_paths", None)
    rt.set_output_dir(tmp_path / "out")
    try:
        for node in (InferixStreamSettings, InferixStreamOut):
            answer = node.validate_inputs(filename_prefix=prefix)
            assert isinstance(answer, str) and "filename_prefix" in answer
    finally:
        rt.set_output_dir(None)


def test_uncreatable_output_folder_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot create the output folder"):
        make_output_dir(blocker / "sub")
    with pytest.raises(ConfigError, match="cannot create the output folder"):
        unique_path(blocker / "sub", "clip", "mp4")


def test_read_only_file_system_is_a_one_line_error(tmp_path, monkeypatch):
    """EROFS as a read-only mount raises it (the test machine cannot mount one, so mkdir is made to)."""
    import errno
    from pathlib import Path

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(ConfigError, match="Read-only file system"):
        make_output_dir(tmp_path / "new")


def test_cli_run_into_an_uncreatable_folder_is_one_line(tmp_path, capsys):
    from inferix_core.cli import main

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    wf = os.path.join(os.path.dirname(__file__), "..", "..", "workflows", "api", "quickstart_api.json")
    assert main(["run", wf, "--output-dir", str(blocker / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot create the output folder") and "Traceback" not in err
