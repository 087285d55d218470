"""Teacher-forcing training of the action-conditioned causal Wan transformer on encoded episodes.

One forward per clip of F latent frames runs 2F frames: the clean clip (timestep 0, lightly noised
against drift) followed by a noisy copy whose blocks each get one of the few *warped inference
timesteps* (so 4-step sampling works without distillation). Both halves share RoPE positions
(`frame_positions`), and a block-causal mask with the inference KV window lets noisy block b see its
own noisy frames plus the clean frames of earlier blocks inside the window, exactly what it sees in the
pipeline's KV cache after the clean context passes. Loss: MSE of the flow (noise − x0), noisy half only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.scheduler.flow_match import FlowMatchScheduler

from .checkpoint import Checkpointer


class WorldModel(nn.Module):
    """The transformer plus the fixed learned prompt (`bundled_context`, (1, text_len, text_dim))."""

    def __init__(self, config: WanConfig):
        super().__init__()
        self.transformer = CausalWanTransformer(config)
        self.bundled_context = nn.Parameter(0.5 * torch.randn(1, config.text_len, config.text_dim))
        # Wan zero-inits nothing at random init here; a small head keeps the first flows near 0.
        nn.init.normal_(self.transformer.head.head.weight, std=1e-3)
        nn.init.zeros_(self.transformer.head.head.bias)


def teacher_forcing_mask(
    num_frames: int, frame_tokens: int, block_frames: int, window_frames: int, device: torch.device | None = None
) -> torch.Tensor:
    """(2L, 2L) boolean mask over [clean frames ‖ noisy frames], L = num_frames·frame_tokens.

    With k = the key's frame and q the query's frame, b(·) the block index, start(b) = b·block_frames
    and W = window_frames (−1 = global), key frames before start(b(q)) − (W − block_frames) are dropped
    (the KV ring has evicted them), and:

        clean query q  → clean keys with b(k) ≤ b(q)            (the context pass of block b(q))
        noisy query q  → clean keys with b(k) < b(q), and noisy keys with b(k) = b(q)
    """
    frame = torch.arange(num_frames, device=device).repeat_interleave(frame_tokens)  # (L,)
    block = frame // block_frames
    past = window_frames - block_frames if window_frames > 0 else num_frames
    in_window = frame.unsqueeze(0) >= (block * block_frames - past).unsqueeze(1)  # (Lq, Lk)
    cc = (block.unsqueeze(0) <= block.unsqueeze(1)) & in_window
    nc = (block.unsqueeze(0) < block.unsqueeze(1)) & in_window
    nn_ = block.unsqueeze(0) == block.unsqueeze(1)
    none = torch.zeros_like(cc)
    return torch.cat([torch.cat([cc, none], 1), torch.cat([nc, nn_], 1)], 0)


def train_world(
    latents: torch.Tensor,
    actions: torch.Tensor,
    config: WanConfig,
    device: torch.device,
    ckpt: Checkpointer,
    max_steps: int,
    time_budget_s: float,
    batch: int = 32,
    lr: float = 4e-4,
    block_frames: int = 3,
    window_frames: int = 12,
    denoising_steps: tuple[int, ...] = (1000, 750, 500, 250),
    shift: float = 5.0,
    context_noise_max: float = 0.1,
    log: Callable[[str], None] = print,
    amp: bool | None = None,
) -> WorldModel:
    """Train on `latents` (N, F, C, h, w) normalised and `actions` (N, F) integer ids.

    Stops at `max_steps` or `time_budget_s`, whichever comes first; the LR schedule follows the
    larger of the two progress fractions, so a time-limited run still anneals.
    """
    n_ep, num_frames, _chans, h, w = latents.shape
    model = WorldModel(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    step = ckpt.restore(model, opt)
    sched = FlowMatchScheduler(shift)
    timesteps = sched.timesteps_for(denoising_steps, warp=True).to(device)  # (S,)
    sigmas = sched.sigma_at(timesteps.cpu()).to(device)  # (S,)
    frame_tokens = config.frame_tokens(h, w)
    mask = teacher_forcing_mask(num_frames, frame_tokens, block_frames, window_frames, device)
    positions = torch.arange(num_frames).repeat(2)
    num_blocks = num_frames // block_frames
    eye = torch.eye(config.action_dim, device=device)
    latents_dev = latents.to(device)
    actions_dev = actions.to(device)
    gen = torch.Generator(device="cpu").manual_seed(1000 + step)
    amp = device.type == "cuda" if amp is None else amp  # bf16 autocast
    t0, last_log, ema = time.time(), time.time(), None
    while step < max_steps and time.time() - t0 < time_budget_s:
        progress = min(1.0, max(step / max_steps, (time.time() - t0) / time_budget_s))
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 200) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * progress)))
        idx = torch.randint(0, n_ep, (batch,), generator=gen).to(device)
        x0 = latents_dev[idx].float()  # (B, F, C, h, w)
        act = eye[actions_dev[idx]]  # (B, F, A)
        # 1. noisy half: one warped inference timestep per block
        k = torch.randint(0, len(timesteps), (batch, num_blocks), device=device).repeat_interleave(block_frames, 1)
        t_noisy, s_noisy = timesteps[k], sigmas[k]  # (B, F)
        noise = torch.randn_like(x0)
        xt = (1 - s_noisy)[..., None, None, None] * x0 + s_noisy[..., None, None, None] * noise
        target = noise - x0
        # 2. clean half at t = 0, with a little noise so generated (imperfect) context does not derail it
        sc = context_noise_max * torch.rand(batch, 1, 1, 1, 1, device=device)
        clean = (1 - sc) * x0 + sc * torch.randn_like(x0)
        x_in = torch.cat([clean, xt], 1).permute(0, 2, 1, 3, 4)  # (B, C, 2F, h, w)
        t_in = torch.cat([torch.zeros_like(t_noisy), t_noisy], 1)  # (B, 2F)
        a_in = torch.cat([act, act], 1)  # (B, 2F, A)
        ctx = model.bundled_context.expand(batch, -1, -1)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            flow = model.transformer(x_in, t_in, ctx, None, action=a_in, frame_positions=positions, attn_mask=mask)
        pred = flow.float()[:, :, num_frames:].permute(0, 2, 1, 3, 4)  # (B, F, C, h, w)
        loss = F.mse_loss(pred, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if time.time() - last_log > 10 or step == max_steps:
            log(
                f"world step {step} loss {loss.item():.4f} (ema {ema:.4f}) lr {opt.param_groups[0]['lr']:.2e} "
                f"({time.time() - t0:.0f}s)"
            )
            last_log = time.time()
        if ckpt.due(step):
            ckpt.save(model, opt, step, ema=ema)
    if step:
        ckpt.save(model, opt, step, ema=ema)
    ema = ema if ema is not None else getattr(ckpt, "extra", {}).get("ema")
    log(f"world done: {step} steps in {time.time() - t0:.0f}s, final loss ema {ema}")
    model.final_loss = ema
    model.steps = step
    return model.eval()
