"""`inferix lvbench` end to end on a tiny mp4 and a PNG folder (proxies only)."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from PIL import Image

from inferix_core.cli import main

from .videos import translating


@pytest.fixture()
def inputs(tmp_path: Path) -> Path:
    video = translating(np.random.default_rng(30), t=24, h=32, w=48, step=2)
    root = tmp_path / "videos"
    (root / "frames").mkdir(parents=True)
    iio.imwrite(root / "a.mp4", video, plugin="pyav", codec="libx264", fps=16)
    for i, frame in enumerate(video[:20]):
        Image.fromarray(frame).save(root / "frames" / f"{i}.png")
    return root


def test_cli_writes_table_json_and_plots(inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, plots = tmp_path / "out.json", tmp_path / "plots"
    rc = main(
        [
            "lvbench",
            str(inputs / "a.mp4"),
            str(inputs / "frames"),
            "--chunks",
            "4",
            "--metrics",
            "clarity",
            "motion",
            "subject",
            "--json",
            str(out),
            "--plot-dir",
            str(plots),
        ]
    )
    assert rc == 0
    table = capsys.readouterr().out
    assert "vde_clarity_proxy" in table and "mean" in table and "not the published" in table
    payload = json.loads(out.read_text())
    assert [Path(v["video"]).name for v in payload["videos"]] == ["a.mp4", "frames"]
    assert payload["videos"][0]["fps"] == 16.0
    assert set(payload["mean"]) >= {"vde_clarity_proxy", "vbench_motion_smoothness_proxy", "vde_subject_proxy"}
    assert sorted(p.name for p in plots.iterdir()) == ["a_lvbench.png", "frames_lvbench.png"]
    assert Image.open(plots / "a_lvbench.png").size[0] > 0


def test_cli_skips_videos_shorter_than_the_chunk_count(inputs: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["lvbench", str(inputs / "frames"), "--chunks", "30", "--metrics", "clarity"]) == 0
    assert "skipped" in capsys.readouterr().out
    assert main(["lvbench", str(inputs / "missing.mp4")]) == 2
