"""bench/bench_streams.py on the CPU (tiny preset), so the H200 harness for many streams and forks does not rot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~10 s alone, more on a shared 2-core machine
def test_streams_bench_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_streams", ROOT / "bench" / "bench_streams.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "streams.json"
    argv = ["--preset", "tiny", "--device", "cpu", "--streams", "1,2", "--blocks", "2", "--forks", "2",
            "--fork-past", "1", "--fork-blocks", "1", "--warmup", "0", "--json", str(out)]  # fmt: skip
    assert mod.main(argv) == 0
    result = json.loads(out.read_text())
    assert [r["streams"] for r in result["streams"]] == [1, 2]
    for row in result["streams"]:
        assert row["batched_fps"] > 0 and row["sequential_fps"] > 0
        assert abs(row["batched_fps"] - row["streams"] * row["batched_fps_per_stream"]) < 1e-9
    forks = result["forks"]
    # the forks hold the past once (1 page) plus one page each; separate runs hold 2 pages each
    assert forks["branched_kv_pages"] == 3 and forks["separate_kv_pages"] == 4
    assert forks["peak_kv_pages"] <= forks["planned_kv_pages"]  # the planner's count bounds what the forks held
    text = capsys.readouterr().out
    assert "batched per block" in text and "forks from one state" in text
