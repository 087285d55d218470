"""The whole v2 training path on CPU at tiny sizes, split as the shipped run is: call 1 (render, autoencoder,
teacher forcing) writes the carry; call 2, on a fresh WORK, resumes from it (rollout phase, export). The
exported files load as a bundled model whose prompt selects the scene."""

from __future__ import annotations

import json

import torch

from inferix_core.models.bundled import load_bundled
from training.checkpoint import MAX_SHARD_BYTES
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
