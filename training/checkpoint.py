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


# -- the carry: what one device call hands the next (the coordinator fetches it back between calls) -----
# A fresh machine per call loses WORK, so each phase also writes its weights (fp32, no optimiser state)
# into OUT/resume as safetensors shards under `MAX_SHARD_BYTES` (the fetch-back limit is 16 MiB a file),
# plus state.json (which phases are done, the autoencoder config with its latent statistics, steps, losses).
MAX_SHARD_BYTES = 15 * 2**20


def save_carry(directory: str | Path, name: str, state: dict[str, torch.Tensor]) -> list[Path]:
    """Write `state` as `<name>-NN.safetensors` shards of at most MAX_SHARD_BYTES each; returns the paths."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob(f"{name}-*.safetensors"):
        old.unlink()
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, value in state.items():
        t = value.detach().float().cpu().contiguous()
        nbytes = t.numel() * t.element_size()
        if nbytes > MAX_SHARD_BYTES:
            raise ValueError(f"tensor {key} has {nbytes} bytes, more than one shard ({MAX_SHARD_BYTES})")
        if size + nbytes > MAX_SHARD_BYTES and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][key] = t
        size += nbytes
    paths = []
    for i, shard in enumerate(shards):
        path = d / f"{name}-{i:02d}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(shard, str(tmp))
        os.replace(tmp, path)
        paths.append(path)
    return paths


def load_carry(directory: str | Path, name: str) -> dict[str, torch.Tensor]:
    """Read back every `<name>-NN.safetensors` shard of `directory` into one state dict."""
    from safetensors.torch import load_file

    paths = sorted(Path(directory).glob(f"{name}-*.safetensors"))
    if not paths:
        raise FileNotFoundError(f"no {name}-NN.safetensors in {directory}: pass the folder call 1 wrote (OUT/resume)")
    state: dict[str, torch.Tensor] = {}
    for p in paths:
        state.update(load_file(str(p)))
    return state
