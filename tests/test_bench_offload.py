"""bench/bench_offload.py on the CPU (tiny preset), so the GPU harness does not rot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_offload_bench_smoke(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}")
    spec = importlib.util.spec_from_file_location("bench_offload", ROOT / "bench" / "bench_offload.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "offload.json"
    assert mod.main(["--smoke", "--latent-frames", "6", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert [r["case"] for r in results] == ["tiny:0.001:window=6", "tiny:full:window=6+fp8w"]
    first = results[0]
    assert first["resident"]["resident_blocks"] is None and first["resident"]["fps"] > 0
    # 0.001 GB (1 MiB) cannot hold the tiny model's run at all: a one-line refusal, not a crash
    assert "error" in first["capped"] and "budget" in first["capped"]["error"]
    assert "FPS" in capsys.readouterr().out
