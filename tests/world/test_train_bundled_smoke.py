"""The whole v2 training path on CPU at tiny sizes, split as the shipped run is: call 1 (render, autoencoder,
teacher forcing) writes the carry; call 2, on a fresh WORK, resumes from it (rollout phase, export). The
exported files load as a bundled model whose prompt selects the scene."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from inferix_core.models.bundled import load_bundled
from training.checkpoint import MAX_SHARD_BYTES, load_carry
from training.train_bundled import main


def test_two_call_smoke_run_exports_a_loadable_prompted_model(tmp_path):
    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    main(["--out", str(out1), "--work", str(tmp_path / "work1"), "--smoke", "--until", "tf"])
    carry = out1 / "resume"
    state = json.loads((carry / "state.json").read_text())
    assert state["done"] == ["ae", "tf"] and state["tf"]["steps"] == 3
    files = sorted(p.name for p in carry.iterdir())
    assert files[0].startswith("ae-") and any(f.startswith("world-") for f in files)
    assert all(p.stat().st_size <= MAX_SHARD_BYTES for p in carry.iterdir())
    assert not (out1 / "transformer.safetensors").exists()  # call 1 hands over the carry only

    main(["--out", str(out2), "--work", str(tmp_path / "work2"), "--smoke", "--resume-from", str(out1)])
    names = sorted(p.name for p in out2.iterdir())
    assert names == ["config.json", "train_log.txt", "transformer.safetensors", "vae.safetensors"]
    log = (out2 / "train_log.txt").read_text()
    assert "tf done" in log and "rollout done" in log  # call 1's log carried over, then call 2's
    config = json.loads((out2 / "config.json").read_text())
    assert config["training"]["rollout"]["steps"] > config["training"]["teacher_forcing"]["steps"]
    assert config["height"] == config["width"] == 32 and config["cache"]["sink_frames"] == 3

    b = load_bundled(out2)
    scenes = b.prompt_encoder.config.scene_names
    assert len(scenes) >= 2
    first, second = (b.encode_prompt(" ".join(b.prompt_encoder.config.scenes[s])) for s in scenes[:2])
    assert not torch.equal(first, second) and torch.equal(b.context, b.encode_prompt(""))


def test_a_further_rollout_phase_continues_from_an_exported_bundle(tmp_path):
    """Call 3 starts from call 2's exported fp16 weights: the steps go on from the bundle's last, the earlier
    calls are recorded, and the weights start exactly where the bundle's were (the first step moves them)."""
    out1, out2, out3 = tmp_path / "out1", tmp_path / "out2", tmp_path / "out3"
    main(["--out", str(out1), "--work", str(tmp_path / "w1"), "--smoke", "--until", "tf"])
    main(["--out", str(out2), "--work", str(tmp_path / "w2"), "--smoke", "--resume-from", str(out1)])
    before = json.loads((out2 / "config.json").read_text())["training"]
    main(
        [
            "--out",
            str(out3),
            "--work",
            str(tmp_path / "w3"),
            "--smoke",
            "--continue-from",
            str(out2),
            "--rollout-blocks",
            "2",
        ]
    )

    carried = load_carry(tmp_path / "w3" / "bundle_carry", "world")
    shipped = load_file(str(out2 / "transformer.safetensors"))
    assert torch.equal(carried["prompt.table"], shipped["bundled_vocabulary"].float())
    assert all(
        torch.equal(carried[f"transformer.{k}"], v.float()) for k, v in shipped.items() if k != "bundled_vocabulary"
    )
    after = json.loads((out3 / "config.json").read_text())["training"]
    assert after["rollout"]["steps"] > before["rollout"]["steps"]  # continued, not restarted at the tf step
    assert after["earlier_calls"][-1] == {"command": before["command"], "rollout": before["rollout"]}
    # --rollout-blocks 2: the rollouts cover the first 2 blocks (6 latent frames) of the 9-frame smoke episodes
    assert before["rollout"]["rollout_frames"] == 9 and after["rollout"]["rollout_frames"] == 6
    assert after["rollout_blocks"] == 2 and after["rollout"]["rollouts"] > 0
    assert "rollout done" in (out3 / "train_log.txt").read_text().split("rollout done", 1)[1]  # call 2's and 3's
    moved = load_file(str(out3 / "transformer.safetensors"))
    assert any(not torch.equal(moved[k], shipped[k]) for k in shipped)
    b = load_bundled(out3)
    assert b.encode_prompt("night").shape[-1] == shipped["bundled_vocabulary"].shape[1]


def test_rollouts_shorter_than_a_clip_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="cannot hold a 6-frame clip"):  # before any rendering or training
        main(["--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--smoke", "--rollout-blocks", "1"])


def test_continue_from_refuses_a_folder_that_is_not_an_exported_bundle(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"family": "wan"}))
    with pytest.raises(SystemExit, match="not a bundle exported"):
        main(
            [
                "--out",
                str(tmp_path / "o"),
                "--work",
                str(tmp_path / "w"),
                "--smoke",
                "--continue-from",
                str(tmp_path / "b"),
            ]
        )


@pytest.mark.slow  # compiling on 2 CPU cores takes ~1 min
def test_compiled_blocks_train_and_save_the_same_keys(tmp_path):
    """--compile trains the same module in place: the carry holds the eager model's keys, rollouts run, it exports."""
    out = tmp_path / "out"
    main(["--out", str(out), "--work", str(tmp_path / "w"), "--smoke", "--until", "tf", "--compile"])
    state = json.loads((out / "resume" / "state.json").read_text())
    assert state["done"] == ["ae", "tf"] and state["tf"]["steps"] == 3
    assert torch.isfinite(torch.tensor(state["tf"]["loss_ema"]))
    keys = set(load_carry(out / "resume", "world"))
    assert keys and not any("_orig_mod" in k for k in keys)
    assert "compiled" in (out / "train_log.txt").read_text()
    final = tmp_path / "final"  # the rollout phase: generation through the compiled blocks, then the export
    main(["--out", str(final), "--work", str(tmp_path / "w2"), "--smoke", "--resume-from", str(out), "--compile"])
    config = json.loads((final / "config.json").read_text())
    assert config["training"]["rollout"]["rollouts"] > 0
    assert load_bundled(final).encode_prompt("").isfinite().all()
