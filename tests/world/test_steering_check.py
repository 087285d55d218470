"""training/steering_check.py scores the steering estimators against the renderer's own geometry."""

from __future__ import annotations

import numpy as np

from training.steering_check import check


def test_the_check_scores_the_estimators_against_the_renderers_geometry():
    res = check(starts=2, log=lambda _: None)  # the renderer and its autoencoder reconstructions, no model
    assert len(res["cases"]) == 4 and {"model_road_centre", "model_channel_mean"}.isdisjoint(res["cases"][0])
    for c in res["cases"]:
        assert abs(c["geometric"]) > 2 and np.sign(c["geometric"]) == (1 if c["steer"] == "left" else -1)
        assert abs(c["renderer_road_centre"] - c["geometric"]) < 1.5
        assert abs(c["autoencoder_road_centre"] - c["geometric"]) < 1.5
    s = res["summary"]["renderer_road_centre"]
    assert s["all"]["sign_right"] == s["all"]["total"] == 4 and set(s) == {"all", "day", "sunset"}
