"""A bundle's world constants travel with it: training records them (`world_spec` in config.json, from
`--stripe-len`), and the evaluation renders the truth with them, so a bundle trained on another world is never
scored against the default renderer. Bundles without the entry are the first v2 ones (`FIRST_V2_WORLD`)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from inferix_core.errors import ConfigError
from inferix_core.models.bundled import load_bundled
from training.data import DatasetSpec, render_one
from training.evaluate import world_of, world_spec_of
from training.train_bundled import main
from training.world import road


def test_spec_from_dict_takes_a_subset_and_refuses_unknown_keys():
    spec = road.WorldSpec.from_dict({"stripe_len": 6.0, "traffic_speed": [4.0, 7.0]})
    assert spec.stripe_len == 6.0 and spec.traffic_speed == (4.0, 7.0) and spec.focal == road.WorldSpec().focal
    assert road.WorldSpec.from_dict(dataclasses.asdict(spec)) == spec  # what an export writes reads back
    with pytest.raises(ConfigError, match="unknown keys \\['stripe_length'\\]"):
        road.WorldSpec.from_dict({"stripe_length": 8.0})


def test_the_stripe_length_changes_the_rendered_road_only_through_the_spec():
    lat = np.array([0, 3, 3, 0])
    pa = road.latent_to_pixel_actions(lat)
    default = road.render_episode(3, pa, 32, 32, scene="day")
    assert np.array_equal(default, road.render_episode(3, pa, 32, 32, scene="day", spec=road.WorldSpec()))
    longer = road.render_episode(3, pa, 32, 32, scene="day", spec=road.WorldSpec(stripe_len=8.0))
    assert not np.array_equal(default[1:], longer[1:])
    # the dataset renders with its own constants
    data = DatasetSpec(num_episodes=1, num_latent_frames=4, height=32, width=32, world={"stripe_len": 8.0})
    plain = dataclasses.replace(data, world={})
    assert DatasetSpec.from_dict(json.loads(json.dumps(data.to_dict()))) == data
    assert not np.array_equal(render_one(data, 0), render_one(plain, 0))


def test_a_bundle_is_evaluated_on_the_world_it_was_trained_on(tmp_path):
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    common = ["--smoke", "--stripe-len", "6"]
    main(["--out", str(out1), "--work", str(tmp_path / "w1"), *common, "--until", "tf"])
    main(["--out", str(out2), "--work", str(tmp_path / "w2"), *common, "--resume-from", str(out1)])
    config = json.loads((out2 / "config.json").read_text())
    assert config["world_spec"]["stripe_len"] == 6.0
    world = world_of(load_bundled(out2))
    assert world.spec == road.WorldSpec(stripe_len=6.0)
    pa = road.latent_to_pixel_actions(np.array([0, 3, 3]))
    expected = road.render_episode(1, pa, world.height, world.width, scene="day", spec=world.spec)
    np.testing.assert_array_equal(world.render(1, pa, "day"), expected)
    assert not np.array_equal(
        world.render(1, pa, "day"), road.render_episode(1, pa, world.height, world.width, scene="day")
    )
    # the shipped files carry no world_spec: the first v2 world, whatever the renderer's default becomes
    assert world_spec_of({"world": "road"}) == road.WorldSpec.from_dict(road.FIRST_V2_WORLD)


def test_a_focus_phase_ends_the_run_on_short_rollouts(tmp_path):
    out = tmp_path / "o"
    main(["--out", str(out), "--work", str(tmp_path / "w"), "--smoke", "--focus-time", "30", "--focus-blocks", "2",
          "--focus-clip-frames", "6"])  # fmt: skip
    training = json.loads((out / "config.json").read_text())["training"]
    focus, rollout = training["focus"], training["rollout"]
    assert focus["steps"] > rollout["steps"] > training["teacher_forcing"]["steps"]
    assert focus["rollouts"] > 0 and focus["rollout_frames"] == 6 and rollout["rollout_frames"] == 9
    assert "focus done" in (out / "train_log.txt").read_text()
    # the fidelity probe scored each phase at its start and its end (training/probe.py)
    for phase, start in (
        (training["teacher_forcing"], 0),
        (rollout, training["teacher_forcing"]["steps"]),
        (focus, rollout["steps"]),
    ):
        assert [r["step"] for r in phase["probes"]] == [start, phase["steps"]]
        assert all(np.isfinite(r["psnr"]) for r in phase["probes"])


def test_a_focus_phase_too_short_for_its_clip_is_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="raise --focus-blocks to 4"):
        main(["--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--smoke", "--focus-time", "5",
              "--focus-clip-frames", "12", "--focus-blocks", "3"])  # fmt: skip
    assert not (tmp_path / "w").exists()
