"""training/action_gain.py: a model that is the renderer has gain 1; one whose car ignores the held action, 0."""

from __future__ import annotations

import numpy as np
import pytest

from training import action_gain, evaluate
from training.world import road


class _Bundle:
    config = {"height": 64}


@pytest.mark.parametrize("responds", [True, False])
def test_gain_of_a_perfect_and_of_a_deaf_car(monkeypatch, responds):
    world = action_gain.V2World(64)

    def fake_rollout(bundle, seed, latent_actions, noise_seed=0, scene=None, world=None):
        lat = np.asarray(latent_actions).copy()
        if not responds:  # the car drives as under "none", whatever is held
            lat[3:] = road.NONE
        return world.render(seed, road.latent_to_pixel_actions(lat), scene), 0.0

    monkeypatch.setattr(evaluate, "rollout", fake_rollout)
    monkeypatch.setattr(action_gain, "V2World", lambda size, spec=None: world)
    out = action_gain.measure(_Bundle(), episodes=1, seconds=0.5, log=lambda *_: None)
    row = out["per_episode"][0]
    assert abs(row["accelerate_gain"]["truth_extra"]) > 0.3 and row["brake_gain"]["truth_extra"] < -0.3
    for name in ("accelerate", "brake"):
        g = row[f"{name}_gain"]
        assert not g["at_search_edge"] and np.isfinite(g["gain"])
        if responds:
            assert g["gain"] == pytest.approx(1.0) and g["model_extra"] == pytest.approx(g["truth_extra"])
        else:  # the offset step (0.125 units) bounds how well a zero gain reads back
            assert abs(g["model_extra"]) <= 0.125 + 1e-9 and g["gain"] < 0.5
