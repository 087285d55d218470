"""Flow-matching UniPC multistep solver (order 2, B(h) = e^h − 1, predictor + corrector), as Wan 2.2 samples.

The solver LongLive 2.0 runs per block (4 steps, shift 5): Wan2.2's `FlowUniPCMultistepScheduler`
(a flow-matching port of diffusers' UniPC) with its defaults, x0 prediction, `lower_order_final`, the
corrector on every step but the first, final σ = 0. Our own implementation of the published method
(Zhao et al., UniPC, 2023); the arithmetic follows the reference's order and precision (float32 σ table,
0-dim float32 coefficients) so a CPU fp32 run matches it to rounding (tests/scheduler/test_unipc.py).

Deterministic: no noise is drawn after a block's initial noise. One solver object per block (`reset()`
starts the next one); model timesteps are the table's integer-truncated values, as the reference calls it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError


class FlowUniPCSolver:
    """UniPC-2 on the shifted flow σ schedule: `step(flow, x)` → next x (and the x0 prediction for previews)."""

    def __init__(self, num_steps: int, shift: float = 5.0, num_train_timesteps: int = 1000, order: int = 2) -> None:
        if num_steps < 1:
            raise ConfigError(f"the UniPC solver needs at least 1 step, got {num_steps}")
        if order not in (1, 2):
            raise ConfigError(f"UniPC order must be 1 or 2, got {order}")
        if shift <= 0:
            raise ConfigError(f"shift must be > 0, got {shift}")
        self.num_steps, self.order = num_steps, order
        # The training table: σ = 1 − linspace(1, 1/N, N) reversed, in float32; its ends bound the schedule.
        alphas = np.linspace(1, 1 / num_train_timesteps, num_train_timesteps)[::-1].copy()
        table = torch.from_numpy(1.0 - alphas).to(torch.float32)
        sigma_max, sigma_min = table[0].item(), table[-1].item()
        s = np.linspace(sigma_max, sigma_min, num_steps + 1).copy()[:-1]
        s = shift * s / (1 + (shift - 1) * s)
        self.timesteps = torch.from_numpy(s * num_train_timesteps).to(torch.int64)  # what the model is called with
        self.sigmas = torch.from_numpy(np.concatenate([s, [0.0]]).astype(np.float32))  # (N + 1,), last σ = 0
        self.reset()

    def reset(self) -> None:
        """Forget the multistep history: the next `step` is the first of a new solve."""
        self.step_index = 0
        self._outputs: list[Tensor | None] = [None] * self.order  # x0 predictions, newest last
        self._last_sample: Tensor | None = None
        self._lower_order_nums = 0
        self._this_order = 0

    def _lambda(self, i: int) -> Tensor:
        sigma = self.sigmas[i]
        return torch.log(1 - sigma) - torch.log(sigma)

    def _coefficients(self, h: Tensor, rks: list, order: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(h·φ₁(h), B(h), R, b) of the B(h) variant for x0 prediction (hh = −h)."""
        hh = -h
        h_phi_1 = torch.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        b_h = torch.expm1(hh)
        rks_t = torch.tensor(rks)
        R, b, factorial = [], [], 1
        for i in range(1, order + 1):
            R.append(torch.pow(rks_t, i - 1))
            b.append(h_phi_k * factorial / b_h)
            factorial *= i + 1
            h_phi_k = h_phi_k / hh - 1 / factorial
        return h_phi_1, b_h, torch.stack(R), torch.tensor(b)

    def _predict(self, x: Tensor, order: int) -> Tensor:
        """UniP: x at σ[i+1] from x at σ[i] and the last `order` x0 predictions."""
        i, m0 = self.step_index, self._outputs[-1]
        sigma_t, sigma_s0 = self.sigmas[i + 1], self.sigmas[i]
        alpha_t = 1 - sigma_t
        lambda_s0 = self._lambda(i)
        h = torch.log(alpha_t) - torch.log(sigma_t) - lambda_s0
        rks, d1 = [], None
        if order == 2:
            rk = (self._lambda(i - 1) - lambda_s0) / h
            rks.append(rk)
            d1 = (self._outputs[-2] - m0) / rk
        rks.append(1.0)
        h_phi_1, b_h, _, _ = self._coefficients(h, rks, order)
        x_t = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0
        if d1 is not None:  # order 2: ρ = 0.5
            x_t = x_t - alpha_t * b_h * (torch.tensor(0.5, dtype=x.dtype) * d1)
        return x_t.to(x.dtype)

    def _correct(self, x0_t: Tensor, last: Tensor, this: Tensor, order: int) -> Tensor:
        """UniC: refine x at σ[i] (predicted from `last`) with the new x0 prediction there."""
        i, m0 = self.step_index, self._outputs[-1]
        sigma_t, sigma_s0 = self.sigmas[i], self.sigmas[i - 1]
        alpha_t = 1 - sigma_t
        lambda_s0 = self._lambda(i - 1)
        h = torch.log(alpha_t) - torch.log(sigma_t) - lambda_s0
        rks, d1 = [], None
        if order == 2:
            rk = (self._lambda(i - 2) - lambda_s0) / h
            rks.append(rk)
            d1 = (self._outputs[-2] - m0) / rk
        rks.append(1.0)
        h_phi_1, b_h, R, b = self._coefficients(h, rks, order)
        rhos = torch.tensor([0.5], dtype=last.dtype) if order == 1 else torch.linalg.solve(R, b).to(last.dtype)
        x_t = sigma_t / sigma_s0 * last - alpha_t * h_phi_1 * m0
        corr = rhos[0] * d1 if d1 is not None else 0
        x_t = x_t - alpha_t * b_h * (corr + rhos[-1] * (x0_t - m0))
        return x_t.to(last.dtype)

    def step(self, flow: Tensor, sample: Tensor) -> tuple[Tensor, Tensor]:
        """One solver step at `timesteps[step_index]`: returns (x at the next σ, the x0 prediction here)."""
        if self.step_index >= self.num_steps:
            raise ConfigError(f"the UniPC solve has {self.num_steps} steps; call reset() before the next block")
        i = self.step_index
        x0 = sample - self.sigmas[i] * flow
        if i > 0 and self._last_sample is not None:
            sample = self._correct(x0, self._last_sample, sample, self._this_order)
        self._outputs = [*self._outputs[1:], x0]
        order = min(self.order, self.num_steps - i)  # lower order on the final step
        self._this_order = min(order, self._lower_order_nums + 1)  # warm-up: order 1 first
        self._last_sample = sample
        nxt = self._predict(sample, self._this_order)
        self._lower_order_nums = min(self._lower_order_nums + 1, self.order)
        self.step_index += 1
        return nxt, x0
