"""Resumable training state: model + optimiser + step in one file, written atomically every N steps."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn


class Checkpointer:
    """Saves `{model, optim, step, extra}` to `path` every `every` steps; `restore` resumes when asked."""

    def __init__(self, path: str | Path, every: int = 500, resume: bool = False):
        self.path = Path(path)
        self.every = every
        self.resume = resume

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def save(self, model: nn.Module, optim: torch.optim.Optimizer, step: int, **extra) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "step": step, "extra": extra}, tmp)
        os.replace(tmp, self.path)

    def restore(self, model: nn.Module, optim: torch.optim.Optimizer | None = None) -> int:
        """Load the saved state if resuming and it exists; returns the step to continue from (0 if fresh)."""
        if not (self.resume and self.path.exists()):
            return 0
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        if optim is not None:
            optim.load_state_dict(state["optim"])
        self.extra = state.get("extra", {})
        print(f"resumed {self.path} at step {state['step']}")
        return int(state["step"])
