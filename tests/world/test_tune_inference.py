"""training/tune_inference.py: variants change only the bundle's config, and the seed guard holds."""

from __future__ import annotations

import json

import pytest

from training import tune_inference as tune
from training.evaluate import EVAL_SEED


def test_a_variant_replaces_only_its_entries():
    config = {"cache": {"window_frames": 12, "sink_frames": 3}, "sampling": {"denoising_steps": [1000, 750]}}
    out = tune.with_variant(config, "nosink")
    assert out["cache"] == {"window_frames": 12, "sink_frames": 0} and out["sampling"] == config["sampling"]
    assert config["cache"]["sink_frames"] == 3  # the shipped config is not touched
    with pytest.raises(SystemExit, match="unknown variant 'sink9'"):
        tune.with_variant(config, "sink9")


@pytest.mark.parametrize("seed", [0, EVAL_SEED])
def test_training_and_evaluation_seeds_are_refused(seed):
    with pytest.raises(SystemExit, match="training or evaluation seed"):
        tune.main(["--seed", str(seed)])


def test_a_short_run_reports_every_part(tmp_path):
    out = tmp_path / "tune.json"
    tune.main(["--variants", "nosink,sink3", "--episodes", "1", "--steer-cases", "1", "--minutes", "0.1",
               "--scenes", "sunset", "--json", str(out)])  # fmt: skip
    rows = json.loads(out.read_text())["variants"]
    assert set(rows) == {"nosink", "sink3"}
    for row in rows.values():
        assert 5 < row["psnr"] < 60 and 0 < row["ssim"] <= 1
        scene = row["sunset"]
        assert set(scene["vde_ratio"]) == {"clarity", "brightness", "background"}
        assert scene["model_last_minute"]["motion"] > 0 and scene["truth_last_minute"]["motion"] > 0
