"""Run a kernel check in Triton's interpreter on the CPU: in a subprocess, since `TRITON_INTERPRET` is read
when a kernel is defined (at import), and the check's last stdout line is its JSON rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_interpreted(code: str, timeout: float = 300) -> list[dict]:
    """`code` (with `{root}` for the repository root on sys.path) run under TRITON_INTERPRET=1 → its JSON rows."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", code.format(root=str(ROOT))], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
