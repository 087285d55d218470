"""bench/bench_wan_i2v.py runs (tiny model on the CPU) and reports every setting asked for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_wan_i2v_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_wan_i2v", ROOT / "bench" / "bench_wan_i2v.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.WAN21_I2V_14B.num_parameters() > 16e9  # the released shape, image branch included
    out = tmp_path / "b.json"
    assert bench.main(["--smoke", "--blocks", "1", "--warmup", "0", "--repeats", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["setting"] for r in rows] == ["bf16"] and rows[0]["pixel_frames"] == 9 and rows[0]["seconds"] > 0
    assert "Wan 2.1 I2V" in capsys.readouterr().out
