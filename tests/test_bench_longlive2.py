"""bench/bench_longlive2.py --smoke on CPU (ours only: the reference needs its checkout), so the GPU protocol does not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_longlive2_smoke(tmp_path):
    out = tmp_path / "ll2.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_longlive2.py"), "--smoke", "--warmup", "0", "--repeats", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # this tree
    proc = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["settings"]["solver"] == "unipc"
    for run in ("ours_diffusion", "ours_end_to_end"):
        assert result[run]["total_s"] > 0 and result[run]["fps"] > 0
        assert 0 < result[run]["first_frame_s"] <= result[run]["total_s"]
    assert "ours_end_to_end" in proc.stdout
    assert result["settings"]["compile"] is False and "ours_compiled_diffusion" not in result


@pytest.mark.slow
def test_bench_longlive2_compile_is_recorded(tmp_path):
    """--compile adds compiled runs after the eager ones and records the flag and the cold start (CPU: ~1 min)."""
    out = tmp_path / "ll2c.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_longlive2.py"), "--smoke", "--compile", "--warmup", "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([*cmd, "--repeats", "1", "--json", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=900, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["settings"]["compile"] is True and result["settings"]["compile_cold_start_s"] > 0
    for run in ("ours_diffusion", "ours_compiled_diffusion", "ours_compiled_end_to_end"):
        assert result[run]["total_s"] > 0 and result[run]["fps"] > 0
