"""Headless Chromium's DevTools port, shared by the browser tests that drive a page over CDP."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

STARTUP_SECONDS = 60.0  # a cold Chromium on a loaded 2-core machine can take well over 10 s


def devtools_port(process: subprocess.Popen, profile: Path, timeout: float = STARTUP_SECONDS) -> int:
    """The port Chromium (started with --remote-debugging-port=0 --user-data-dir=PROFILE) listens on.

    Waits for its DevToolsActivePort file; raises if Chromium exits first or does not start in time.
    """
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while not (port_file.is_file() and port_file.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Chromium did not start (exit code {process.poll()})")
        time.sleep(0.1)
    return int(port_file.read_text().split()[0])
