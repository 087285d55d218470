"""One scheduler interface for the block loop: `begin(block_index)` gives a fresh solve whose `step` the loop
calls the same way for every solver (issue #43).

A `BlockSolve` walks one block's timesteps and holds that walk's own history (UniPC's multistep outputs), so two
blocks, or two batched groups of streams, never share solver state. `StepOutput.block` is set on the last step
only: the block's clean latents as the reference records them (flow-match: the last x0; UniPC: the σ = 0 sample).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from ..errors import ConfigError
from .flow_match import FlowMatchScheduler
from .sampling import SamplingConfig
from .unipc import FlowUniPCSolver

Noise = Callable[[int], Tensor]


@dataclass(frozen=True)
class StepOutput:
    x0: Tensor  # the clean prediction at this step (previews, hooks)
    sample: Tensor | None  # the next step's input; None after the last step of a flow-match walk
    block: Tensor | None  # the block's latents, on the last step only


class BlockSolve(Protocol):
    timesteps: Tensor

    def step(self, flow: Tensor, sample: Tensor, noise: Noise) -> StepOutput: ...


class Scheduler(Protocol):
    timesteps: Tensor  # the timesteps of every block but a first one with its own list
    sigmas: list[float]  # σ of each of those steps

    def begin(self, block_index: int) -> BlockSolve: ...


class FlowMatchSolve:
    """One block's few-step walk: x0 = x − σ_s·flow, then renoised to σ_{s+1} with `noise(s + 1)`."""

    def __init__(self, scheduler: FlowMatchScheduler):
        self.scheduler, self.timesteps, self.index = scheduler, scheduler.step_timesteps, 0

    def step(self, flow: Tensor, sample: Tensor, noise: Noise) -> StepOutput:
        s = self.index
        if s >= len(self.timesteps):
            raise ConfigError(f"this block's solve has {len(self.timesteps)} steps; begin() the next block")
        self.index += 1
        out = self.scheduler.step(flow, s, sample, noise)
        last = self.index == len(self.timesteps)
        return StepOutput(out.x0, out.prev_sample, out.x0 if last else None)


class FlowMatchSchedule:
    """The few-step flow-match schedule; block 0 may walk its own list (`first_block_denoising_steps`)."""

    def __init__(self, sampling: SamplingConfig):
        self.scheduler = FlowMatchScheduler(sampling.shift, sampling.num_train_timesteps)
        self.timesteps = self.scheduler.set_timesteps(sampling.denoising_steps, sampling.warp_denoising_steps)
        self.sigmas = list(self.scheduler.step_sigmas)
        self.first_scheduler = self.scheduler
        first = sampling.first_block_denoising_steps
        if first is not None:  # Causal-Forcing++: a second scheduler holds block 0's list
            self.first_scheduler = FlowMatchScheduler(sampling.shift, sampling.num_train_timesteps)
            self.first_scheduler.set_timesteps(first, sampling.warp_denoising_steps)

    def begin(self, block_index: int) -> FlowMatchSolve:
        return FlowMatchSolve(self.first_scheduler if block_index == 0 else self.scheduler)


class UniPCSolve:
    """One block's UniPC-2 solve with its own multistep history; `noise` is unused (a deterministic solver)."""

    def __init__(self, template: FlowUniPCSolver):
        self.solver = copy.copy(template)  # the schedule's tables shared read-only, a history of its own
        self.solver.reset()
        self.timesteps = self.solver.timesteps.float()

    def step(self, flow: Tensor, sample: Tensor, noise: Noise) -> StepOutput:
        nxt, x0 = self.solver.step(flow, sample)
        last = self.solver.step_index == self.solver.num_steps
        return StepOutput(x0, nxt, nxt if last else None)  # the σ = 0 sample is the block, as the reference


class UniPCSchedule:
    """UniPC-2 on the shifted flow σ schedule (LongLive 2.0); every block walks the same timesteps."""

    def __init__(self, sampling: SamplingConfig):
        if sampling.first_block_denoising_steps is not None:
            raise ConfigError("first_block_denoising_steps is not supported with the UniPC solver")
        self.solver = FlowUniPCSolver(len(sampling.denoising_steps), sampling.shift, sampling.num_train_timesteps)
        expected = tuple(int(t) for t in self.solver.timesteps)
        if sampling.denoising_steps != expected:
            raise ConfigError(
                f"with the UniPC solver, {len(expected)} steps at shift {sampling.shift} are the timesteps "
                f"{','.join(map(str, expected))}; got {','.join(map(str, sampling.denoising_steps))}"
            )
        self.timesteps = self.solver.timesteps.float()
        self.sigmas = [float(s) for s in self.solver.sigmas[:-1]]

    def begin(self, block_index: int) -> UniPCSolve:
        return UniPCSolve(self.solver)


SCHEDULERS: dict[str, Callable[[SamplingConfig], Scheduler]] = {
    "renoise": FlowMatchSchedule,  # the few-step flow-match walk with fresh noise between steps
    "unipc": UniPCSchedule,
}


def make_scheduler(sampling: SamplingConfig) -> Scheduler:
    """The schedule of `sampling.solver`; an unknown solver is refused naming the known ones."""
    make = SCHEDULERS.get(sampling.solver)
    if make is None:
        raise ConfigError(f"unknown solver '{sampling.solver}'; known: {', '.join(sorted(SCHEDULERS))}")
    return make(sampling)
