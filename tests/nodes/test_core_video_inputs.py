"""Stream Out, Profile Report and LV-Bench Score take a core VIDEO as well as an INFERIX_VIDEO (issue #52).

Block Denoise's core_video carries its VideoResult (the streamed mp4, the per-block profile), so wired into
Stream Out and Profile Report through `inferix run` it behaves as the INFERIX_VIDEO output does; a VIDEO from
any other node is rebuilt from its components (frames and frame rate).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from inferix_nodes.core_video import as_inferix_video, core_video

from inferix_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORE_VIDEO_OUTPUT = 3  # Block Denoise: latent, frames, video, core_video, world_state


def quickstart(tmp_path: Path, video_output: int) -> Path:
    wf = json.loads((ROOT / "workflows" / "api" / "quickstart_api.json").read_text())
    den = next(k for k, v in wf.items() if v["class_type"] == "InferixBlockDenoise")
    out = next(k for k, v in wf.items() if v["class_type"] == "InferixStreamOut")
    wf[den]["inputs"]["num_blocks"] = 2
    wf[out]["inputs"]["video"] = [den, video_output]
    wf["90"] = {"class_type": "InferixProfileReport", "inputs": {"video": [den, video_output]}}
    path = tmp_path / f"wf_{video_output}.json"
    path.write_text(json.dumps(wf))
    return path


def test_block_denoise_core_video_into_stream_out_and_profile_report_through_inferix_run(tmp_path, capsys):
    def run(video_output: int) -> tuple[str, list[Path]]:
        out_dir = tmp_path / f"out{video_output}"
        code = main(["run", str(quickstart(tmp_path, video_output)), "--output-dir", str(out_dir), "--no-progress"])
        text = capsys.readouterr()
        assert code == 0, text.err
        return text.out, sorted(out_dir.rglob("*.mp4"))

    core_out, core_files = run(CORE_VIDEO_OUTPUT)
    _, ours_files = run(2)
    # the streamed mp4 is shown as is (one file, no second encode), and the profile came along
    assert len(core_files) == len(ours_files) == 1
    assert "node 90:" in core_out and "block" in core_out.split("node 90:")[1].lower()


def test_a_core_video_from_another_node_is_rebuilt_from_its_components(node_classes):
    images = torch.rand(12, 16, 24, 3)
    rebuilt = as_inferix_video(core_video(images, 12.0))  # nothing carried: as a core node's VIDEO
    assert rebuilt.fps == 12.0 and rebuilt.profile is None and rebuilt.files == ()
    assert rebuilt.frames.dtype == np.uint8 and rebuilt.frames.shape == (12, 16, 24, 3)
    assert np.array_equal(rebuilt.frames, (images * 255).round().byte().numpy())
    for name in ("InferixStreamOut", "InferixProfileReport", "InferixLVBenchScore"):
        types = node_classes[name].INPUT_TYPES()
        spec = {**types.get("required", {}), **types.get("optional", {})}["video"][0]
        assert set(spec.split(",")) == {"INFERIX_VIDEO", "VIDEO"}, name
    with pytest.raises(Exception, match="carries no profile"):
        node_classes["InferixProfileReport"].execute(video=core_video(images, 12.0))


def test_lvbench_score_scores_a_core_video(node_classes):
    frames = torch.rand(20, 32, 32, 3)
    cls = node_classes["InferixLVBenchScore"]
    scores, table = cls.execute(
        metrics=next(iter(cls.INPUT_TYPES()["required"]["metrics"][0])), chunks=2, video=core_video(frames, 8.0)
    )[:2]
    assert json.loads(scores) and table
