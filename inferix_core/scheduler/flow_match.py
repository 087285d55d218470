"""Flow-matching scheduler of the Wan family, as used by few-step causal models.

σ(s) = shift·s / (1 + (shift − 1)·s) on s = linspace(1, 0, N + 1)[:-1], timestep = N_train·σ.
A denoising step list such as [1000, 750, 500, 250] may be *warped* onto this table (entry 1000 − v
of the table followed by 0), which is what Self-Forcing does. σ of a timestep is looked up by nearest
table entry. Arithmetic precision matches the reference: tables in float32, x0 conversion in float64,
re-noising in float32. No model import here.

`set_timesteps` + `step` are the few-step sampler the pipeline drives (the shape of diffusers'
`FlowMatchEulerDiscreteScheduler.step(..., stochastic_sampling=True)`): the pipeline calls the model and
hands the flow to `step`, so a new update rule is a new scheduler, not an edit of the block loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import ConfigError


@dataclass(frozen=True)
class FlowMatchStepOutput:
    """What one few-step update produces."""

    x0: torch.Tensor  # the clean prediction of this step (the block's output after the last step)
    prev_sample: torch.Tensor | None  # the next step's input; None after the last step


class FlowMatchScheduler:
    def __init__(
        self,
        shift: float = 5.0,
        num_train_timesteps: int = 1000,
        num_inference_steps: int = 1000,
        sigma_min: float = 0.0,
        sigma_max: float = 1.0,
    ):
        if shift <= 0:
            raise ConfigError(f"shift must be > 0, got {shift}")
        self.shift = shift
        self.num_train_timesteps = num_train_timesteps
        s = torch.linspace(sigma_max, sigma_min, num_inference_steps + 1, dtype=torch.float32)[:-1]
        self.sigmas = shift * s / (1 + (shift - 1) * s)  # (N,) float32
        self.timesteps = self.sigmas * num_train_timesteps  # (N,) float32
        self.step_timesteps = torch.zeros(0, dtype=torch.float32)  # the few-step list (set_timesteps)
        self.step_sigmas: list[float] = []  # σ of each step of that list

    def warp(self, steps: list[int] | tuple[int, ...]) -> torch.Tensor:
        """Map a raw step list onto the shifted table: v -> table[N_train − v], table = timesteps ++ [0]."""
        table = torch.cat([self.timesteps, torch.zeros(1, dtype=torch.float32)])
        idx = torch.tensor([self.num_train_timesteps - int(v) for v in steps])
        if (idx < 0).any() or (idx >= table.numel()).any():
            raise ConfigError(f"denoising steps {list(steps)} must lie in [1, {self.num_train_timesteps}]")
        return table[idx]

    def timesteps_for(self, steps: list[int] | tuple[int, ...], warp: bool) -> torch.Tensor:
        """The float32 timesteps the model is called with."""
        if list(steps) != sorted(steps, reverse=True) or len(set(steps)) != len(steps):
            raise ConfigError(f"denoising steps must be strictly decreasing, got {list(steps)}")
        return self.warp(steps) if warp else torch.tensor([float(v) for v in steps], dtype=torch.float32)

    def index_of(self, timestep: torch.Tensor) -> torch.Tensor:
        """Nearest table index of each timestep (float32 comparison, like the reference)."""
        t = timestep.to(torch.float32).reshape(-1).cpu()
        return torch.argmin((self.timesteps.unsqueeze(0) - t.unsqueeze(1)).abs(), dim=1)

    def sigma_at(self, timestep: float | torch.Tensor) -> torch.Tensor:
        """σ (float32) for each timestep."""
        t = torch.as_tensor(timestep, dtype=torch.float32)
        return self.sigmas[self.index_of(t)].reshape(t.shape)

    def to_x0(self, flow: torch.Tensor, xt: torch.Tensor, sigma: float) -> torch.Tensor:
        """x0 = xt − σ·flow, computed in float64 and returned in flow's dtype."""
        return (xt.double() - float(sigma) * flow.double()).to(flow.dtype)

    def set_timesteps(self, steps: list[int] | tuple[int, ...], warp: bool) -> torch.Tensor:
        """Choose the few-step list `step` walks; returns its float32 timesteps (what the model is called with)."""
        self.step_timesteps = self.timesteps_for(steps, warp)
        self.step_sigmas = [float(s) for s in self.sigma_at(self.step_timesteps)]
        return self.step_timesteps

    def step(
        self,
        flow: torch.Tensor,
        step_index: int,
        sample: torch.Tensor,
        noise: Callable[[int], torch.Tensor],
    ) -> FlowMatchStepOutput:
        """One stochastic few-step update: x0 = x − σ_s·flow, then x ← (1 − σ_{s+1})·x0 + σ_{s+1}·ε.

        Args:
            flow: the model's flow prediction at step `step_index` (float32, the sample's layout).
            sample: that step's input x.
            noise: called as noise(step_index + 1) for fresh ε, only when a next step exists, so a seeded
                source draws exactly as often as the reference does.
        """
        if not self.step_sigmas:
            raise ConfigError("call set_timesteps(steps, warp) before step()")
        x0 = self.to_x0(flow, sample, self.step_sigmas[step_index])
        if step_index + 1 >= len(self.step_sigmas):
            return FlowMatchStepOutput(x0, None)
        nxt = step_index + 1
        return FlowMatchStepOutput(x0, self.add_noise(x0, noise(nxt), self.step_sigmas[nxt]))

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
        """(1 − σ)·x0 + σ·noise with a float32 σ (the reference's add_noise)."""
        s = torch.tensor(sigma, dtype=torch.float32)
        return ((1 - s) * x0.float() + s * noise.float()).to(noise.dtype)
