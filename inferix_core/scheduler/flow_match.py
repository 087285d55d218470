"""Flow-matching scheduler of the Wan family, as used by few-step causal models.

σ(s) = shift·s / (1 + (shift − 1)·s) on s = linspace(1, 0, N + 1)[:-1], timestep = N_train·σ.
A denoising step list such as [1000, 750, 500, 250] may be *warped* onto this table (entry 1000 − v
of the table followed by 0), which is what Self-Forcing does. σ of a timestep is looked up by nearest
table entry. Arithmetic precision matches the reference: tables in float32, x0 conversion in float64,
re-noising in float32. No model import here.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError


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

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
        """(1 − σ)·x0 + σ·noise with a float32 σ (the reference's add_noise)."""
        s = torch.tensor(sigma, dtype=torch.float32)
        return ((1 - s) * x0.float() + s * noise.float()).to(noise.dtype)
