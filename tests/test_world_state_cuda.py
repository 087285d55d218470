"""World states with real CUDA streams (the offloaded cache's copies overlap compute there, unlike the CPU
lanes): resume after k blocks equals never stopping, bitwise, for every cache kind; and the bench harness
(bench/bench_world_state.py) on the CPU so it does not rot."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_world_state", ROOT / "bench" / "bench_world_state.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_harness_on_the_cpu(tmp_path):
    out = tmp_path / "ws.json"
    assert _bench().main(["--smoke", "--json", str(out)]) == 0
    assert out.is_file()


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["ring", "paged", "offload", "int8"])
def test_resume_equals_never_stopping_on_cuda(kind):
    mod = _bench()
    args = argparse.Namespace(preset="tiny", device="cuda", dtype="fp32", window=6, sink=0, blocks=4, more=2)
    row = mod.run_case(kind, args)
    assert row["bitwise_equal"], row
    assert torch.cuda.is_available()
