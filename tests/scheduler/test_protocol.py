"""The one Scheduler protocol (issue #43): every solver is driven as `begin(block).step(flow, sample, noise)`.

References: flow-match against its own closed form (x0 = x − σ·flow, renoised to the next σ with the drawn noise,
in float64), UniPC against `FlowUniPCSolver` driven by hand (itself checked against the authors' scheduler in
test_unipc.py). The model is a fixed random linear map, so every step sees fresh, non-trivial inputs.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.errors import ConfigError
from inferix_core.scheduler import FlowUniPCSolver, SamplingConfig, make_scheduler

SHAPE = (1, 3, 4, 5, 6)


def linear_model(seed: int):
    g = torch.Generator().manual_seed(seed)
    a, bias = torch.randn(4, 4, generator=g) / 2, torch.randn(1, 1, 4, 1, 1, generator=g)

    def flow(x: torch.Tensor, t: float) -> torch.Tensor:
        return torch.einsum("oc,bfchw->bfohw", a.to(x.dtype), x) + (t / 1000) * bias.to(x.dtype)

    return flow


def test_flow_match_solve_is_the_closed_form_and_block_0_walks_its_own_list():
    sampling = SamplingConfig(denoising_steps=(1000, 500), first_block_denoising_steps=(1000, 750, 500, 250))
    schedule = make_scheduler(sampling)
    flow_of = linear_model(1)
    g = torch.Generator().manual_seed(2)
    for block, n in ((0, 4), (1, 2), (5, 2)):
        solve = schedule.begin(block)
        assert len(solve.timesteps) == n
        x = torch.randn(SHAPE, generator=g)
        draws = [torch.randn(SHAPE, generator=g) for _ in range(n)]
        ref = x.double()
        for s, t in enumerate(solve.timesteps.tolist()):
            flow = flow_of(x, t)
            out = solve.step(flow, x, draws.__getitem__)
            sigma = float(solve.scheduler.step_sigmas[s])
            want_x0 = ref - sigma * flow.double()
            torch.testing.assert_close(out.x0.double(), want_x0, atol=1e-5 * float(want_x0.abs().max()), rtol=0)
            if s + 1 < n:  # float32 arithmetic against float64: a few ulps of the sample's scale
                nxt = float(solve.scheduler.step_sigmas[s + 1])
                want = (1 - nxt) * want_x0 + nxt * draws[s + 1].double()
                torch.testing.assert_close(out.sample.double(), want, atol=1e-5 * float(want.abs().max()), rtol=0)
                assert out.block is None
                x, ref = out.sample, want
            else:
                assert out.sample is None and out.block is out.x0
        with pytest.raises(ConfigError, match="begin"):
            solve.step(flow, x, draws.__getitem__)


def test_unipc_solves_keep_their_own_history():
    """Two blocks' solves interleaved step by step give bitwise what each gives alone: no shared history."""
    sampling = SamplingConfig(denoising_steps=(999, 937, 833, 624), solver="unipc")
    schedule = make_scheduler(sampling)
    flow_of = linear_model(3)
    g = torch.Generator().manual_seed(4)
    starts = [torch.randn(SHAPE, generator=g) for _ in range(2)]

    def alone(x: torch.Tensor) -> list[torch.Tensor]:
        solver, outs = FlowUniPCSolver(4, shift=sampling.shift), []
        for t in solver.timesteps.tolist():
            x, x0 = solver.step(flow_of(x, float(t)), x)
            outs.append(x0)
        return [*outs, x]

    want = [alone(x) for x in starts]
    solves, xs = [schedule.begin(0), schedule.begin(1)], list(starts)
    got: list[list[torch.Tensor]] = [[], []]
    for t in solves[0].timesteps.tolist():
        for i, solve in enumerate(solves):
            out = solve.step(flow_of(xs[i], t), xs[i], lambda k: pytest.fail("UniPC draws no noise"))
            got[i].append(out.x0)
            xs[i] = out.sample
            assert (out.block is not None) == (len(got[i]) == 4)
        assert all(torch.isfinite(x).all() for x in xs)
    for i in range(2):
        assert all(torch.equal(a, b) for a, b in zip(got[i], want[i][:4], strict=True))
        assert torch.equal(xs[i], want[i][4])


def test_unknown_or_mismatched_solvers_are_refused():
    with pytest.raises(ConfigError, match="timesteps"):
        make_scheduler(SamplingConfig(denoising_steps=(1000, 750, 500, 250), solver="unipc"))
    with pytest.raises(ConfigError, match="first_block_denoising_steps"):
        make_scheduler(SamplingConfig(denoising_steps=(999, 937, 833, 624), solver="unipc",
                                      first_block_denoising_steps=(1000, 500)))  # fmt: skip
