"""A real ComfyUI server with this node pack linked in, for tests/integration.

Needs COMFYUI_DIR (a ComfyUI checkout) and COMFYUI_PYTHON (a Python with ComfyUI's requirements);
every test here is skipped without them. The server runs on CPU on a free port in a temporary base
directory (custom_nodes/ holds a symlink to this repository) and is always stopped, process group
and all, when the session ends. See docs/comfyui_integration.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = float(os.environ.get("COMFYUI_STARTUP_TIMEOUT", "300"))


@dataclass
class ComfyServer:
    url: str
    base_dir: Path
    log_path: Path
    process: subprocess.Popen

    @property
    def output_dir(self) -> Path:
        return self.base_dir / "output"

    def get_json(self, path: str, timeout: float = 60.0):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def post_json(self, path: str, body: dict, timeout: float = 60.0) -> tuple[int, dict]:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def inferix(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run `inferix <args>` with this test session's Python (the client side)."""
        return subprocess.run(
            [sys.executable, "-m", "inferix_core", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL whatever is left."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)
    except ProcessLookupError:
        pass


@contextlib.contextmanager
def launch(base: Path, *, cpu: bool = True, extra_args: tuple[str, ...] = ()):
    """A ComfyUI server in `base` (custom_nodes/ComfyUI-Inferix → this repository), stopped on exit."""
    comfy_dir, python = os.environ.get("COMFYUI_DIR"), os.environ.get("COMFYUI_PYTHON")
    if not comfy_dir or not python:
        pytest.skip("set COMFYUI_DIR and COMFYUI_PYTHON to run the real-ComfyUI tests (docs/comfyui_integration.md)")
    if not (Path(comfy_dir) / "main.py").is_file():
        pytest.fail(f"COMFYUI_DIR={comfy_dir} has no main.py")
    (base / "custom_nodes").mkdir(exist_ok=True)
    (base / "custom_nodes" / "ComfyUI-Inferix").symlink_to(REPO, target_is_directory=True)
    port = _free_port()
    log_path = base / "server.log"
    cmd = [
        python,
        "main.py",
        *(["--cpu"] if cpu else []),
        "--listen",
        "127.0.0.1",
        "--port",
        str(port),
        "--disable-auto-launch",
        "--base-directory",
        str(base),
        "--database-url",
        "sqlite:///:memory:",
        *extra_args,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd, cwd=comfy_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )  # own process group, so _stop reaches every child
    server = ComfyServer(f"http://127.0.0.1:{port}", base, log_path, process)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"ComfyUI exited with {process.returncode} during start-up:\n{server.log_tail()}")
            try:
                server.get_json("/system_stats", timeout=5)
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"ComfyUI did not answer within {STARTUP_TIMEOUT_S:.0f} s:\n{server.log_tail()}")
                time.sleep(1)
        yield server
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def comfyui(tmp_path_factory) -> ComfyServer:
    with launch(tmp_path_factory.mktemp("comfyui_base")) as server:
        yield server


@pytest.fixture(scope="session")
def object_info(comfyui) -> dict:
    return comfyui.get_json("/object_info", timeout=300)
