"""Train the TinyCausalAE on random clips of rendered episodes (L1 + MSE on pixels, noisy latents).

The latent gets Gaussian noise (10% of its batch std) and a small L2 pull before decoding, so the
decoder tolerates the small errors a generator makes and the latent scale stays put. Per-channel
latent mean/std are measured afterwards (`latent_stats`) and stored in the config for normalisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE

from .checkpoint import Checkpointer


def to_video(frames: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (B, T, H, W, 3) → float (B, 3, T, H, W) in [-1, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    return x.permute(0, 4, 1, 2, 3).float().div(127.5).sub(1.0)


def sample_clips(
    frames: np.ndarray, episodes: np.ndarray, batch: int, clip_frames: int, rng: np.random.Generator
) -> np.ndarray:
    idx = rng.choice(episodes, size=batch)
    starts = rng.integers(0, frames.shape[1] - clip_frames + 1, size=batch)
    return np.stack([frames[i, s : s + clip_frames] for i, s in zip(idx, starts)])


def train_ae(
    frames_fn: Callable[[], tuple[np.ndarray, np.ndarray]],
    config: TinyAEConfig,
    device: torch.device,
    ckpt: Checkpointer,
    max_steps: int,
    time_budget_s: float,
    batch: int = 32,
    clip_frames: int = 9,
    lr: float = 1e-3,
    log: Callable[[str], None] = print,
    amp: bool | None = None,
) -> TinyCausalAE:
    """Train until `max_steps` or `time_budget_s`; `frames_fn()` returns (frames memmap, ready episode ids)."""
    model = TinyCausalAE(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    step = ckpt.restore(model, opt)
    rng = np.random.default_rng(step)
    t0, last_log = time.time(), time.time()
    loss = torch.tensor(float("nan"))
    amp = device.type == "cuda" if amp is None else amp  # bf16 autocast
    while step < max_steps and time.time() - t0 < time_budget_s:
        frames, ready = frames_fn()
        if len(ready) == 0:
            time.sleep(0.5)
            continue
        progress = max(step / max_steps, (time.time() - t0) / time_budget_s)
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(progress, 1.0))))
        video = to_video(sample_clips(frames, ready, batch, clip_frames, rng), device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            mu = model.encode_raw(video)
            z = mu + 0.1 * mu.detach().std() * torch.randn_like(mu)
            recon, _ = model.decode_raw(z)
        recon = recon.float()
        l1 = (recon - video).abs().mean()
        mse = F.mse_loss(recon, video)
        reg = mu.float().pow(2).mean()
        loss = l1 + mse + 1e-4 * reg
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if time.time() - last_log > 10 or step == max_steps:
            psnr = 10 * np.log10(4.0 / max(mse.item(), 1e-10))
            log(
                f"ae step {step} loss {loss.item():.4f} l1 {l1.item():.4f} psnr {psnr:.2f} dB "
                f"({len(ready)} episodes ready, {time.time() - t0:.0f}s)"
            )
            last_log = time.time()
        if ckpt.due(step):
            ckpt.save(model, opt, step)
    if step:
        ckpt.save(model, opt, step)
    log(f"ae done: {step} steps in {time.time() - t0:.0f}s, final loss {loss.item():.4f}")
    return model.eval()


@torch.no_grad()
def latent_stats(
    model: TinyCausalAE, frames: np.ndarray, episodes: np.ndarray, device: torch.device, batch: int = 16
) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of the raw latents over `episodes`."""
    zs = []
    for a in range(0, len(episodes), batch):
        zs.append(model.encode_raw(to_video(frames[episodes[a : a + batch]], device)).float())
    z = torch.cat(zs).transpose(0, 1).flatten(1)  # (z_dim, N)
    return z.mean(1).tolist(), z.std(1).clamp_min(1e-3).tolist()


@torch.no_grad()
def encode_dataset(model: TinyCausalAE, frames: np.ndarray, device: torch.device, batch: int = 32) -> torch.Tensor:
    """Normalised latents of every episode: (N, F, z, h, w) float16 on the CPU."""
    out = []
    for a in range(0, frames.shape[0], batch):
        z = model.encode(to_video(frames[a : a + batch], device))  # (B, z, F, h, w)
        out.append(z.permute(0, 2, 1, 3, 4).half().cpu())
    return torch.cat(out)
