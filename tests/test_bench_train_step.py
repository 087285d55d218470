"""bench/bench_train_step.py on the CPU with the smoke model, so the H200 training-throughput bench does not rot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_step_bench_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_train_step", ROOT / "bench" / "bench_train_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "train.json"
    argv = ["--device", "cpu", "--smoke", "--variants", "eager", "--batches", "2,3", "--latent-size", "4",
            "--clip-frames", "6", "--rollout-blocks", "2", "--warmup", "1", "--steps", "2", "--rollouts", "1",
            "--json", str(out)]  # fmt: skip
    assert mod.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["variant"], r["batch"]) for r in rows] == [("eager", 2), ("eager", 3)]
    for r in rows:
        assert r["step_ms"] > 0 and r["rollout_ms"] > 0
        assert abs(r["clips_per_s"] - r["batch"] * r["steps_per_s"]) <= 0.01 * r["clips_per_s"] + 0.1
