"""Flow UniPC solver (LongLive 2.0 / Wan 2.2 sampling) against the authors' FlowUniPCMultistepScheduler.

tests/fixtures/longlive2_unipc*.safetensors is written by bench/fixtures/gen_longlive2_unipc.py from their
scheduler driven as their pipeline drives it; the fixed linear "model" is replayed here from the file.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inferix_core.errors import ConfigError
from inferix_core.scheduler.unipc import FlowUniPCSolver
from tests.fixture_utils import files_of_kind

FIXTURES = files_of_kind("unipc")


@pytest.fixture(params=FIXTURES, ids=[p.name for p in FIXTURES], scope="module")
def fx(request):
    return json.loads(safe_open(str(request.param), "pt").metadata()["info"]), load_file(str(request.param))


def test_fixture_present():
    assert FIXTURES, "no tests/fixtures/longlive2_unipc*.safetensors; run bench/fixtures/gen_longlive2_unipc.py"


def test_solver_matches_the_reference(fx):
    info, t = fx
    for k, case in enumerate(info["cases"]):
        solver = FlowUniPCSolver(case["steps"], shift=case["shift"])
        assert torch.equal(solver.timesteps.float(), t[f"case{k}.timesteps"]), case
        assert torch.equal(solver.sigmas, t[f"case{k}.sigmas"]), case
        x = t[f"case{k}.noise"]
        for s, step_t in enumerate(solver.timesteps.tolist()):
            flow = torch.einsum("oc,bfchw->bfohw", t["A"], x) + (torch.tensor(float(step_t)) / 1000) * t["bias"]
            x, x0 = solver.step(flow, x)
            assert torch.isfinite(x).all()
            torch.testing.assert_close(x0, t[f"case{k}.x0"][s], atol=1e-5, rtol=0)
            torch.testing.assert_close(x, t[f"case{k}.samples"][s], atol=1e-5, rtol=0)


def test_the_last_step_lands_on_its_x0_prediction():
    """Final σ = 0 and order 1 there: the solve ends exactly at the last x0 prediction."""
    solver = FlowUniPCSolver(4, shift=5.0)
    x = torch.randn(2, 3, 4)
    for _ in range(4):
        x, x0 = solver.step(torch.randn_like(x), x)
    torch.testing.assert_close(x, x0, atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="reset"):
        solver.step(x, x)
    solver.reset()
    solver.step(x, x)  # a new solve


def test_order_two_is_exact_for_a_linear_flow_field():
    """For flow = x − x_data (data at x_data) x0 is exact every step, so the solve returns x_data (float64)."""
    data = torch.randn(3, 5, dtype=torch.float64)
    solver = FlowUniPCSolver(4, shift=5.0)
    solver.sigmas = solver.sigmas.double()
    x = torch.randn(3, 5, dtype=torch.float64)
    for _ in range(4):
        sigma = solver.sigmas[solver.step_index]
        flow = (x - data) / sigma  # x = (1 − σ)·data + σ·noise ⇒ noise − data = (x − data) / σ
        x, x0 = solver.step(flow, x)
        torch.testing.assert_close(x0, data)
    torch.testing.assert_close(x, data)
