"""bench/bench_matrix_game2.py in its CPU `--smoke` mode, so the GPU side-by-side keeps working.

The reference run needs the authors' Matrix-Game-2 folder: INFERIX_MG2_REFERENCE or the exported copy at
/work/ref/matrix-game-3ceb3114/Matrix-Game-2; without it only our side runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "bench_matrix_game2.py"
REFERENCE = Path(os.environ.get("INFERIX_MG2_REFERENCE", "/work/ref/matrix-game-3ceb3114/Matrix-Game-2"))


def _bench(*args: str) -> int:
    """Run the script in its own process: its import shims for the reference must not leak into this one."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parents[1]), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, timeout=900).returncode


@pytest.mark.slow
def test_smoke_ours(tmp_path):
    out = tmp_path / "mg2.json"
    assert _bench("--smoke", "--variants", "templerun", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["variant"], r["run"]) for r in rows] == [("templerun", "ours")]
    assert rows[0]["fps"] > 0 and 0 < rows[0]["first_block_s"] <= rows[0]["median_total_s"]


@pytest.mark.slow
@pytest.mark.skipif(not (REFERENCE / "pipeline" / "causal_inference.py").is_file(), reason="no Matrix-Game-2 checkout")
def test_smoke_side_by_side_with_the_reference(tmp_path):
    out = tmp_path / "mg2.json"
    assert _bench("--smoke", "--reference-dir", str(REFERENCE), "--variants", "universal", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["run"] for r in rows] == ["reference", "ours"]
    assert all(r["fps"] > 0 for r in rows)
    # same weights and the reference's own noise draws at the real geometry: the same latents
    assert rows[1]["max_abs_diff_vs_reference"] < 1e-4
