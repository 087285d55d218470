"""Matrix-Game 2.0: every action setting the weights cannot tell is read from the file's config, never guessed.

The RoPE split (`mouse_qk_dim_list`), `rope_theta` and the VAE's temporal ratio are not in any tensor shape;
the loader takes them from the file's own `action_config` (its metadata, as the fixtures store it, or the
`config.json` the authors ship beside the weights) and falls back to the released values only where no
config has the key, saying so in the log. Each case rewrites a fixture's header (same tensors) so the stored
config disagrees with the released defaults.
"""

from __future__ import annotations

import json
import logging

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError
from inferix_core.models.wan.checkpoint import load_wan_checkpoint
from tests.fixture_utils import files_of_kind, read_fixture

FILES = files_of_kind("matrix_game2")
pytestmark = pytest.mark.skipif(not FILES, reason="no Matrix-Game 2.0 fixture in tests/fixtures")


def _rewrite(src, dst, edit_action=None, keep_metadata=True) -> dict:
    """A copy of `src` whose `info.config.action_config` went through `edit_action` (or no metadata at all).

    The copy keeps the fixture's `config` and `pipeline` (its run settings), nothing else of `info`."""
    info, _ = read_fixture(src)
    with safe_open(str(src), "pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys() if k.startswith("weights.")}  # noqa: SIM118
    act = dict(info["config"]["action_config"])
    if edit_action is not None:
        edit_action(act)
    info["config"]["action_config"] = act
    kept = {"config": info["config"], "pipeline": info["pipeline"]}
    meta = {"info": json.dumps(kept)} if keep_metadata else None
    save_file({k[len("weights.") :]: v for k, v in weights.items()}, str(dst), metadata=meta)
    return info["config"]


def _other_split(act):
    act["mouse_qk_dim_list"] = [16, 24, 24]
    act["rope_theta"] = 10000.0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_rope_split_and_theta_come_from_the_files_config(path, tmp_path):
    dst = tmp_path / "model.safetensors"
    _rewrite(path, dst, _other_split)
    _, config, _ = load_wan_checkpoint(dst)
    act = config.action_config
    assert list(act.mouse_qk_dim_list) == [16, 24, 24] and act.rope_theta == 10000.0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_stored_action_key_is_what_the_loader_uses(path, tmp_path):
    """The loaded action config equals the stored one key for key (the tiny fixtures' own values)."""
    dst = tmp_path / "model.safetensors"
    stored = _rewrite(path, dst)["action_config"]
    _, config, _ = load_wan_checkpoint(dst)
    mine = config.action_config.to_dict()
    assert {k: mine[k] for k in stored if k in mine} == {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in stored.items() if k in mine
    }


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_config_json_beside_the_weights_is_read(path, tmp_path):
    """The released files carry no metadata; the authors' config.json beside them gives split and theta."""
    dst = tmp_path / "model.safetensors"
    cfg = _rewrite(path, dst, _other_split, keep_metadata=False)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _, config, _ = load_wan_checkpoint(dst, num_heads=cfg["num_heads"])
    assert list(config.action_config.mouse_qk_dim_list) == [16, 24, 24] and config.action_config.rope_theta == 1e4


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_missing_key_is_guessed_and_said(path, tmp_path, caplog):
    def drop(act):
        act.pop("mouse_qk_dim_list", None)
        act.pop("rope_theta", None)

    dst = tmp_path / "model.safetensors"
    _rewrite(path, dst, drop)
    with caplog.at_level(logging.WARNING):
        _, config, _ = load_wan_checkpoint(dst)
    assert list(config.action_config.mouse_qk_dim_list) == [8, 28, 28] and config.action_config.rope_theta == 256
    assert "mouse_qk_dim_list" in caplog.text and "rope_theta" in caplog.text


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_window_the_weights_contradict_is_refused(path, tmp_path):
    """windows_size × ratio must be the rows the keyboard projection takes; a config that says otherwise fails."""

    def wrong(act):
        act["windows_size"] = act.get("windows_size", 3) + 1

    dst = tmp_path / "model.safetensors"
    _rewrite(path, dst, wrong)
    with pytest.raises((ConfigError, CheckpointLayoutError), match="windows_size"):
        load_wan_checkpoint(dst)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_run_settings_come_from_the_file(path, tmp_path):
    """Steps, warp, shift, block size, context timestep, window and sink: the file's, not the variant's."""
    from inferix_core.models.registry import load_world_model

    info, _ = read_fixture(path)
    dst = tmp_path / "model.safetensors"
    _rewrite(path, dst)
    run = {"denoising_step_list": [1000, 500], "warp_denoising_step": False, "timestep_shift": 3.0,
           "num_frame_per_block": 2, "context_noise": 17}  # fmt: skip
    with safe_open(str(dst), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    cfg = {**info["config"], "local_attn_size": 8, "sink_size": 2}
    save_file(tensors, str(dst), metadata={"info": json.dumps({"config": cfg, "pipeline": run})})
    wm = load_world_model(str(dst), device="cpu", dtype="fp32")
    s, c = wm.sampling, wm.default_cache
    assert (s.denoising_steps, s.warp_denoising_steps, s.shift) == ((1000, 500), False, 3.0)
    assert (s.block_frames, s.context_noise, c.window_frames, c.sink_frames) == (2, 17, 8, 2)
    _rewrite(path, dst)  # the fixture's own settings
    wm = load_world_model(str(dst), device="cpu", dtype="fp32")
    assert wm.sampling.denoising_steps == tuple(info["pipeline"]["denoising_step_list"])
    assert wm.default_cache.window_frames == info["config"]["local_attn_size"]


def test_unreleased_action_width_runs_when_every_setting_is_stored(tmp_path):
    """Weights of no released variant (keyboard 5) load only with every run setting stored: nothing is guessed."""
    from inferix_core.models.registry import load_world_model
    from tests.models.test_matrix_game2_checkpoint import released_state

    path = tmp_path / "model.safetensors"
    run = {"denoising_step_list": [1000, 600], "warp_denoising_step": True, "timestep_shift": 5.0,
           "num_frame_per_block": 3, "context_noise": 0, "local_attn_size": 6, "sink_size": 0}  # fmt: skip
    save_file(released_state(5, True), str(path), metadata={"info": json.dumps({"pipeline": run})})
    wm = load_world_model(str(path), device="cpu", dtype="fp32")
    assert wm.config.action_config.keyboard_dim_in == 5 and wm.sampling.denoising_steps == (1000, 600)
    del run["context_noise"]
    save_file(released_state(5, True), str(path), metadata={"info": json.dumps({"pipeline": run})})
    with pytest.raises(ConfigError, match="no released"):
        load_world_model(str(path), device="cpu", dtype="fp32")
