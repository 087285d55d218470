"""training/fidelity_bound.py runs at tiny settings, scores the truth against itself as identical (the control
that must come out perfect), and gives alternative futures whose prefix is the episode's bit for bit and whose
future is not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training.fidelity_bound import main

IDENTICAL_DB = 148.1  # compare.psnr of identical frames (its MSE floor of 1e-10)


def test_the_truth_against_itself_is_identical_and_a_redrawn_future_is_not(tmp_path):
    path = tmp_path / "bound.json"
    args = ["--episodes", "1", "--alternates", "2", "--modes", "none", "exact", "--diagnostics", "--threads", "1"]
    out = main([*args, "--json", str(path)])
    assert json.loads(path.read_text())["none"]["alternates"] == 2

    none = out["none"]["scores"]
    for key in ("alternate_psnr", "mean_psnr"):
        assert none[key]["mean"] > IDENTICAL_DB and len(none[key]["per_half_second"]) == 4
    assert none["alternate_ssim"]["mean"] == pytest.approx(1.0) and none["mean_ssim"]["mean"] == pytest.approx(1.0)
    # the autoencoder ceiling: encode/decode of the truth, of the alternatives (the truth) and of their mean agree
    ae = none["ae_truth_psnr"]["mean"]
    assert 20.0 < ae < 40.0
    for key in ("ae_alternate_psnr", "ae_mean_psnr", "ae_latent_mean_psnr"):
        assert none[key]["mean"] == pytest.approx(ae, abs=1e-6)

    exact = out["exact"]
    info = exact["episodes_info"][0]
    assert info["prefix_identical"] == 2 and info["differs_from_truth"] == 2
    assert 0.0 < info["cut_ahead_of_car"] <= 61.0
    assert exact["scores"]["alternate_psnr"]["mean"] < IDENTICAL_DB  # the re-drawn future is not the truth's
    assert exact["scores"]["ae_alternate_psnr"]["mean"] <= ae + 0.5

    diag = out["diagnostics"]["scores"]  # predictors right but for one thing: each costs what it leaves out
    assert diag["hold_psnr"]["mean"] < diag["ahead_2.0_psnr"]["mean"] < diag["ahead_0.25_psnr"]["mean"]
    assert diag["speed_10_psnr"]["mean"] < diag["speed_2_psnr"]["mean"] < IDENTICAL_DB
    assert diag["no_scenery_psnr"]["mean"] <= diag["no_objects_psnr"]["mean"] < IDENTICAL_DB


def test_modes_are_checked():
    with pytest.raises(SystemExit):
        main(["--modes", "view0", "--no-ae"])


@pytest.mark.parametrize("d", [-1.5, 0.0, 0.75, 2.0])
def test_track_offsets_reads_back_a_known_offset(d):
    """Frames rendered with the car d units ahead (from the last prefix frame on) read back as d at every frame;
    a steady speed error reads as a ramp that starts near 0."""
    from training.fidelity_bound import PREFIX_FRAMES, V2World, _ahead, _faster, track_offsets

    world = V2World(64)
    ep = world.episode(0, 6)
    sl = slice(PREFIX_FRAMES, PREFIX_FRAMES + 8)
    frames = world.render_without(ep, frozenset(), edit=_ahead(d))[sl]
    assert (track_offsets(world, ep, frames, sl) == d).all()
    if d == 0.0:
        ramp = track_offsets(world, ep, world.render_without(ep, frozenset(), edit=_faster(0.1))[sl], sl)
        assert ramp[0] <= 0.25 and (ramp[-1] >= ramp[0] + 0.25) and (ramp > 0).any()


def test_phase_diagnostics_report_the_model_and_the_autoencoder():
    out = main(["--episodes", "1", "--modes", "--diagnostics", "--model", "--phase", "--seconds", "0.5", "--no-ae"])
    diag = out["diagnostics"]
    ae, model = diag["autoencoder_track_offset"], diag["model_track_offset"]
    assert len(model["per_episode_per_frame"]) == 1 and len(model["per_episode_per_frame"][0]) == 8
    assert ae["per_half_second_mean_abs"][0] <= 0.5  # the autoencoder keeps the stripes' phase
    assert all(np.isfinite(model["per_half_second_mean_abs"]))
