"""The scheduler's few-step update (FlowMatchScheduler.step) against the stored reference steps.

Each fixture stores, per block and step, the model's input, its flow and the reference's x0 and re-noise
draw, so the update is checked on its own, independent of the transformer. The x0 conversion must be
bitwise: the reference converts in float64 and rounds once; doing it in float32 is off by an ulp in
most steps (well inside 1e-4, which is why the end-to-end parity tests alone cannot see it), and the
claim that a seed reproduces the reference bitwise on CPU rests on it.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.errors import ConfigError
from inferix_core.scheduler import FlowMatchScheduler
from tests.fixture_utils import read_fixture, self_forcing_runs

FILES = self_forcing_runs()


def _scheduler(info) -> FlowMatchScheduler:
    p = info["pipeline"]
    sch = FlowMatchScheduler(p["timestep_shift"], p["num_train_timesteps"], p["scheduler"]["num_inference_steps"])
    sch.set_timesteps(p["denoising_step_list"], p["warp_denoising_step"])
    return sch


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_step_reproduces_reference_bitwise(path):
    info, t = read_fixture(path)
    p = info["pipeline"]
    sch = _scheduler(info)
    steps = len(p["denoising_step_list"])
    assert torch.equal(sch.step_timesteps, t["timesteps_warped" if p["warp_denoising_step"] else "timesteps_used"])
    for b in range(p["num_blocks"]):
        for s in range(steps):
            drawn = []

            def noise(step, b=b, drawn=drawn):
                drawn.append(step)
                return t[f"block{b}.step{step}.noise"]

            x = t[f"block{b}.step{s}.input"]
            out = sch.step(t[f"block{b}.step{s}.flow_pred"], s, x, noise)
            assert torch.equal(out.x0, t[f"block{b}.step{s}.x0_pred"]), (b, s)
            if s + 1 < steps:
                assert drawn == [s + 1]
                torch.testing.assert_close(out.prev_sample, t[f"block{b}.step{s + 1}.input"], atol=1e-6, rtol=0)
            else:
                assert drawn == [] and out.prev_sample is None  # no draw after the last step


def test_float32_x0_is_not_bitwise():
    """The float64 step is not decoration: the same update in float32 misses the stored x0 somewhere."""
    path = next(iter(FILES))
    info, t = read_fixture(path)
    p = info["pipeline"]
    sch = _scheduler(info)
    mismatched = 0
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            x, flow = t[f"block{b}.step{s}.input"], t[f"block{b}.step{s}.flow_pred"]
            sigma = torch.tensor(sch.step_sigmas[s], dtype=torch.float32)
            mismatched += not torch.equal(x - sigma * flow, t[f"block{b}.step{s}.x0_pred"])
    assert mismatched > 0


def test_step_needs_timesteps():
    sch = FlowMatchScheduler()
    with pytest.raises(ConfigError, match="set_timesteps"):
        sch.step(torch.randn(2), 0, torch.randn(2), lambda step: torch.randn(2))
