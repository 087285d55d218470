"""training/detached_run.sh: a job started detached outlives its caller, `wait` tells running (3) from ended (0)
by the pid file (a `pgrep -f` on the job's name would match the waiting shell itself), and copies the files back."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "training" / "detached_run.sh"
pytestmark = pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_start_wait_and_collect(tmp_path):
    job, back = tmp_path / "job", tmp_path / "back"
    marker = tmp_path / "go"
    # the job ends only when the marker exists, so "still running" is certain when first asked
    cmd = f"mkdir -p {job}/out && echo weights > {job}/out/w.txt; while [ ! -e {marker} ]; do sleep 0.1; done; exit 7"
    started = _run("start", str(job), "--", "bash", "-c", cmd)
    assert started.returncode == 0 and "started pid" in started.stdout
    running = _run("wait", str(job), "1", str(back))
    assert running.returncode == 3 and "still running" in running.stdout
    marker.touch()
    t0 = time.time()
    ended = _run("wait", str(job), "30", str(back))
    assert ended.returncode == 0 and "ended with status 7" in ended.stdout and time.time() - t0 < 20
    assert (back / "out" / "w.txt").read_text() == "weights\n" and (back / "log").exists()
    again = _run("start", str(job), "--", "true")
    assert again.returncode == 2 and "use another DIR" in again.stderr
    assert _run("wait", str(tmp_path / "never"), "1").returncode == 2
