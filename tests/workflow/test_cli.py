"""`inferix run` from the command line: clear one-line errors and a non-zero exit for user mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferix_core.cli import main

HERE = Path(__file__).parent


def run_cli(capsys, tmp_path, workflow, *extra):
    path = tmp_path / "wf.json"
    path.write_text(workflow if isinstance(workflow, str) else json.dumps(workflow))
    code = main(
        [
            "run",
            str(path),
            "--nodes-module",
            "dummy_nodes",
            "--no-progress",
            "--output-dir",
            str(tmp_path / "out"),
            *extra,
        ]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def test_success_prints_outputs(capsys, tmp_path, workflow, nodes):
    code, out, err = run_cli(capsys, tmp_path, workflow, "--set", "1.value=5")
    assert code == 0, err
    assert "ran 3 node(s)" in out and str(tmp_path / "out" / "result_3.txt") in out
    assert (tmp_path / "out" / "result_3.txt").read_text() == "18"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda w: w["2"].update(class_type="Test_Seedd"),
            "node 2: unknown node type 'Test_Seedd'; did you mean 'Test_Seeded'?",
        ),
        (lambda w: w["2"]["inputs"].pop("seed"), "node 2 (Test_Seeded), input 'seed': required input is missing"),
        (lambda w: w["2"]["inputs"].update(x=["7", 0]), "input 'x': links to node 7, which is not in the workflow"),
        (lambda w: w["2"]["inputs"].update(x=["1", 3]), "input 'x': links to output 3 of node 1 (Test_Number)"),
        (lambda w: w["1"]["inputs"].update(value=1000), "input 'value': value 1000 is above the maximum 100"),
        (lambda w: w["2"]["inputs"].update(mode="div"), "input 'mode': 'div' is not one of ['add', 'mul']"),
        (lambda w: w["2"]["inputs"].update(scale="big"), "input 'scale': expected FLOAT, got str 'big'"),
        (
            lambda w: w["1"].update(class_type="Test_Latent", inputs={}),
            "expects INT but is linked to output 0 of node 1",
        ),
        (lambda w: w["1"].update(class_type="Test_Add", inputs={"a": ["2", 0], "b": ["2", 0]}), "cycle: 1 → 2 → 1"),
    ],
)
def test_each_mistake_has_its_message(capsys, tmp_path, workflow, nodes, mutate, expected):
    mutate(workflow)
    code, _, err = run_cli(capsys, tmp_path, workflow)
    assert code == 2
    assert err.startswith("error: ") and expected in err
    assert "Traceback" not in err


def test_bad_override_and_bad_json(capsys, tmp_path, workflow, nodes):
    code, _, err = run_cli(capsys, tmp_path, workflow, "--set", "2.sede=3")
    assert code == 2 and "did you mean 'seed'" in err
    code, _, err = run_cli(capsys, tmp_path, "{not json")
    assert code == 2 and "is not valid JSON" in err
    code = main(["run", str(tmp_path / "missing.json"), "--nodes-module", "dummy_nodes"])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_node_failure_exits_non_zero(capsys, tmp_path, workflow, nodes):
    workflow["2"] = {"class_type": "Test_Boom", "inputs": {"x": ["1", 0]}}
    code, _, err = run_cli(capsys, tmp_path, workflow)
    assert code == 2 and "node 2: Test_Boom failed: RuntimeError: kaboom" in err


def test_subprocess_with_env_module(tmp_path, workflow):
    """The installed entry point, with dummy nodes injected through $INFERIX_NODES_MODULE."""
    wf = tmp_path / "wf.json"
    workflow["1"]["inputs"]["value"] = -3
    wf.write_text(json.dumps(workflow))
    env = {
        **os.environ,
        "INFERIX_NODES_MODULE": "dummy_nodes",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "inferix_core", "run", str(wf), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: node 1 (Test_Number), input 'value': value -3 is below the minimum 0 (allowed 0 to 100)"
    )
