"""The side-by-side harnesses drive the other side on the same math as ours: their CPU parity checks.

bench/compare_comfy_core.py --tiny --check: ComfyUI core's CausalWanModel under core's own sample_ar_video (read
from the checkout), against our pipeline with the same weights, sigmas and noise, within 1e-4 in CPU float32. Skipped unless
COMFYUI_DIR names a ComfyUI checkout (v0.27+) or the packed .ref/comfy; the Python is COMFYUI_PYTHON when set
(it has core's requirements), else this one with the harness's shims (comfy_kitchen must then be importable or
in KITCHEN_DIR, e.g. the packed .ref/ck). bench/compare_longlive.py --tiny --check: LongLive v1.0's pipeline (window, sink, LoRA
merged) against ours; skipped unless LONGLIVE_DIR names a v1.0 checkout and its packages (REFSITE, e.g.
/tmp/refsite with omegaconf and peft) import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(*extra: str) -> dict:
    paths = [str(ROOT / ".shim"), str(ROOT), *extra, os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _importable(python: str, module: str, env: dict, first: str = "") -> bool:
    code = f"import importlib.util, sys; sys.path.insert(0, {first!r}); sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], env=env, capture_output=True).returncode == 0


def _run_core_harness(out: Path, *args: str, timeout: float) -> dict:
    """bench/compare_comfy_core.py --tiny ARGS against core from COMFYUI_DIR (skipped without it); its JSON."""
    comfy_dir = os.environ.get("COMFYUI_DIR")
    if not comfy_dir:
        pytest.skip("set COMFYUI_DIR to a ComfyUI v0.27+ checkout (or .ref/comfy) to run core's side")
    python = os.environ.get("COMFYUI_PYTHON") or sys.executable
    env, kitchen = _env(), os.environ.get("KITCHEN_DIR", "")
    if not _importable(python, "comfy_kitchen", env, kitchen):
        pytest.skip(f"comfy_kitchen is not importable by {python} (set COMFYUI_PYTHON, or KITCHEN_DIR=.ref/ck)")
    cmd = [python, str(ROOT / "bench" / "compare_comfy_core.py"), "--comfyui-dir", comfy_dir, "--tiny", *args]
    cmd += ["--kitchen-dir", kitchen] if kitchen else []
    proc = subprocess.run(
        [*cmd, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.integration
def test_comfy_core_parity_on_cpu(tmp_path):
    check = _run_core_harness(tmp_path / "core_check.json", "--check", timeout=300)["check"]
    assert check["ok"] and check["max_abs_diff"] < 1e-4 and len(check["per_block"]) == 2
    assert check["max_abs_core"] > 1e-2  # a non-trivial output, so agreement means something


@pytest.mark.integration
def test_longlive_parity_on_cpu(tmp_path):
    ref = os.environ.get("LONGLIVE_DIR")
    if not ref:
        pytest.skip("set LONGLIVE_DIR to a NVlabs/LongLive v1.0 checkout (and REFSITE to omegaconf/peft) to run it")
    env = _env(os.environ.get("REFSITE", ""))
    for module in ("omegaconf", "peft"):
        if not _importable(sys.executable, module, env):
            pytest.skip(f"LongLive needs {module}: pip install --target /tmp/refsite {module}; set REFSITE")
    out = tmp_path / "ll_check.json"
    cmd = [sys.executable, str(ROOT / "bench" / "compare_longlive.py"), "--reference-dir", ref, "--tiny", "--check"]
    proc = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    check = json.loads(out.read_text())["check"]
    assert check["ok"] and check["max_abs_diff"] < 1e-4
    assert check["lora_effect"] > 1e-2  # the merged LoRA changes the output, so it is compared too


@pytest.mark.integration
def test_core_torch_compile_model_path_ignores_its_kv_cache(tmp_path):
    """ComfyUI core's TorchCompileModel + sample_ar_video, with the SDPA attention core picks on CUDA: its
    compiled output is not its eager output (fp32, CPU), while ours compiled equals ours eager. The node's
    guard filter drops the guards on `transformer_options`, where the sampler keeps the KV cache's `end` and
    the block's `start_frame`, so the first trace's offsets stay baked in (docs/performance.md, #19)."""
    variants = ("--variants", "eager,compile", "--warmup", "1", "--repeats", "1", "--core-pytorch-attention")
    diffs = _run_core_harness(tmp_path / "core_compile.json", *variants, timeout=600)["max_abs_diff"]
    assert diffs["ours_compile_vs_eager"] < 1e-4
    assert diffs["core_compile_vs_eager"] > 1e-2, diffs
