"""Training of the action- and prompt-conditioned causal Wan transformer: teacher forcing, then rollouts.

Both phases use one masked full-sequence forward per clip of F latent frames over 2F frames: a clean
clip (timestep 0) followed by a noisy copy whose blocks each get one of the few *warped inference
timesteps* (so 4-step sampling works without distillation). Both halves share RoPE positions
(`frame_positions`), and a block-causal mask with the inference KV window lets noisy block b see its
own noisy frames plus the clean frames of earlier blocks inside the window, exactly what it sees in the
pipeline's KV cache after the clean context passes. Loss: MSE of the flow (noise − x0), noisy half only.

* Teacher forcing (`train_world`): the clean half is the true clip (lightly noised against drift).
* Rollouts (`train_rollout`): the model first generates the episode itself with the real KV-cache
  pipeline (no grad, batched) from one true block, following the episode's actions; the clean half is
  then [true first block ‖ generated blocks] and the noisy targets stay the TRUE frames of the same
  actions. The renderer is the ground truth, so the model learns to steer its own (drifting) history
  back onto the data, which is what a long rollout needs; a share of teacher-forcing steps keeps the
  clean-context skill.

The prompt is a learned word table (`VocabularyPromptEncoder`): each episode's context is its scene's
words, so the scene (palette / time of day) is a condition the model must use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline.block_diffusion import BlockDiffusionPipeline, GenerationRequest, SeededNoise
from inferix_core.scheduler import SamplingConfig
from inferix_core.scheduler.flow_match import FlowMatchScheduler
from inferix_core.text.vocabulary import VocabularyConfig, VocabularyPromptEncoder

from .checkpoint import Checkpointer
from .data import LatentPool


class WorldModel(nn.Module):
    """The transformer plus the prompt's learned word table (`bundled_vocabulary`, (V, text_dim))."""

    def __init__(self, config: WanConfig, vocabulary: VocabularyConfig):
        super().__init__()
        self.transformer = CausalWanTransformer(config)
        table = 0.5 * torch.randn(len(vocabulary.words), config.text_dim)
        self.prompt = VocabularyPromptEncoder(vocabulary, table.requires_grad_(True))
        # a small head keeps the first flows near 0
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


@dataclass
class FlowSetup:
    """What every training step shares: the warped inference timesteps and the clip's mask."""

    timesteps: torch.Tensor  # (S,)
    sigmas: torch.Tensor  # (S,)
    mask: torch.Tensor
    positions: torch.Tensor
    clip_frames: int
    block_frames: int

    @classmethod
    def build(cls, config: WanConfig, sampling: SamplingConfig, cache: KVCacheConfig, clip_frames: int,
              latent_hw: tuple[int, int], device: torch.device) -> FlowSetup:  # fmt: skip
        sched = FlowMatchScheduler(sampling.shift)
        timesteps = sched.timesteps_for(sampling.denoising_steps, warp=sampling.warp_denoising_steps).to(device)
        sigmas = sched.sigma_at(timesteps.cpu()).to(device)
        tokens = config.frame_tokens(*latent_hw)
        mask = teacher_forcing_mask(clip_frames, tokens, sampling.block_frames, cache.window_frames, device)
        positions = torch.arange(clip_frames).repeat(2)
        return cls(timesteps, sigmas, mask, positions, clip_frames, sampling.block_frames)


def flow_loss(
    model: WorldModel,
    setup: FlowSetup,
    context_latents: torch.Tensor,
    target_latents: torch.Tensor,
    actions: torch.Tensor,
    scene_ids: torch.Tensor,
    context_noise_max: float,
    amp: bool,
) -> torch.Tensor:
    """Flow-matching MSE of the noisy half; clean half = `context_latents`, targets from `target_latents`.

    Latents (B, F, C, h, w) with F = setup.clip_frames, actions one-hot (B, F, A), scene_ids (B,).
    """
    bsz, nf = target_latents.shape[:2]
    dev = target_latents.device
    nb = nf // setup.block_frames
    k = torch.randint(0, len(setup.timesteps), (bsz, nb), device=dev).repeat_interleave(setup.block_frames, 1)
    t_noisy, s_noisy = setup.timesteps[k], setup.sigmas[k]  # (B, F)
    noise = torch.randn_like(target_latents)
    xt = (1 - s_noisy)[..., None, None, None] * target_latents + s_noisy[..., None, None, None] * noise
    target = noise - target_latents
    sc = context_noise_max * torch.rand(bsz, 1, 1, 1, 1, device=dev)
    clean = (1 - sc) * context_latents + sc * torch.randn_like(context_latents)
    x_in = torch.cat([clean, xt], 1).permute(0, 2, 1, 3, 4)  # (B, C, 2F, h, w)
    t_in = torch.cat([torch.zeros_like(t_noisy), t_noisy], 1)  # (B, 2F)
    a_in = torch.cat([actions, actions], 1)  # (B, 2F, A)
    ids = model.prompt.ids_for_scenes([model.prompt.config.scene_names[int(i)] for i in scene_ids.tolist()])
    ctx = model.prompt.context_for_ids(ids)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
        flow = model.transformer(
            x_in, t_in, ctx, None, action=a_in, frame_positions=setup.positions, attn_mask=setup.mask
        )
    pred = flow.float()[:, :, nf:].permute(0, 2, 1, 3, 4)
    return F.mse_loss(pred, target)


@torch.no_grad()
def rollout(
    model: WorldModel,
    sampling: SamplingConfig,
    cache: KVCacheConfig,
    true_latents: torch.Tensor,
    actions: torch.Tensor,
    scene_ids: torch.Tensor,
    prefix_frames: int,
    seed: int,
) -> torch.Tensor:
    """The model's own episodes: [true first `prefix_frames` ‖ generated], (B, F, C, h, w), batched.

    Runs the inference path itself (BlockDiffusionPipeline with its KV ring cache and the sampling
    settings), so what the model is trained on afterwards is what it will see at inference.
    """
    bsz, nf, c, h, w = true_latents.shape
    n = sampling.block_frames
    ids = model.prompt.ids_for_scenes([model.prompt.config.scene_names[int(i)] for i in scene_ids.tolist()])
    ctx = model.prompt.context_for_ids(ids).float()
    pipe = BlockDiffusionPipeline(model.transformer, sampling, cache)
    num_blocks = (nf - prefix_frames) // n
    dev = true_latents.device
    req = GenerationRequest(
        num_blocks=num_blocks,
        latent_height=h,
        latent_width=w,
        context=ctx,
        batch_size=bsz,
        actions=actions.float(),
        initial_latents=true_latents[:, :prefix_frames].float(),
        noise=SeededNoise(seed, device=dev, total_shape=(bsz, num_blocks * n, c, h, w)),
    )
    return torch.cat([out.latents.float() for out in pipe.stream(req)], 1)


def _lr(base: float, step: int, progress: float, warmup: int) -> float:
    return base * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(progress, 1.0))))


def schedule_progress(steps_done: int, steps_left: int, now: float, t_start: float, t_first: float | None,
                      budget_s: float) -> float:  # fmt: skip
    """How far the LR schedule is: the larger of the step fraction and the time fraction.

    The time fraction counts from the end of the first step (`t_first`), over what the budget had left
    then: waiting for data and compiling the first shapes (`--compile`: ~40 s on an H200) would otherwise
    anneal the LR before any training happened. Before the first step it is 0.
    """
    by_steps = steps_done / max(1, steps_left)
    if t_first is None:
        return by_steps
    return max(by_steps, (now - t_first) / max(1e-6, budget_s - (t_first - t_start)))


def train_world(
    pool: LatentPool,
    model: WorldModel,
    sampling: SamplingConfig,
    cache: KVCacheConfig,
    device: torch.device,
    ckpt: Checkpointer,
    max_steps: int,
    time_budget_s: float,
    batch: int = 64,
    lr: float = 4e-4,
    clip_frames: int = 18,
    context_noise_max: float = 0.1,
    rollout_share: float = 0.0,
    rollout_reuse: int = 2,
    rollout_blocks: int | None = None,
    start_step: int = 0,
    phase: str = "tf",
    min_ready: int = 256,
    log: Callable[[str], None] = print,
    amp: bool | None = None,
    probe: Callable[[WorldModel], dict] | None = None,
    probe_every_s: float = 30.0,
) -> dict:
    """Train `model` in place on `pool` (refreshed as rendering goes) until `max_steps` or `time_budget_s`.

    rollout_share = 0: teacher forcing only. > 0: that share of the steps trains on the model's own
    rollouts (each rollout batch is reused for `rollout_reuse` steps with fresh noise and crops); a rollout
    covers the whole episode, or only its first `rollout_blocks` blocks (the true one included), which makes
    each rollout cheaper and puts its clips where the fidelity bar measures (`rollout_blocks · 3` latent
    frames must hold a clip).
    The LR schedule follows the larger of the step and time fractions (`schedule_progress`), so a time-limited
    run anneals.
    Training starts once `min_ready` episodes (or all) are encoded, so early steps do not overfit a few.
    `probe` (training/probe.py) scores the model as the fidelity bar does, at the phase's start, every
    `probe_every_s` seconds and at its end; its records go to "probes" (step, seconds into the phase, PSNR).
    Returns {"steps", "loss_ema", "rollout_loss_ema", "seconds", "rollouts", "rollout_seconds", "rollout_frames",
    "probes"}.
    """
    num_frames = pool.latents.shape[1]
    h, w = pool.latents.shape[-2:]
    n = sampling.block_frames
    clip_frames = min(clip_frames, num_frames - num_frames % n)
    setup = FlowSetup.build(model.transformer.config, sampling, cache, clip_frames, (h, w), device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    step = ckpt.restore(model, opt) or start_step
    first = step
    eye = torch.eye(model.transformer.config.action_dim, device=device)
    gen = torch.Generator(device="cpu").manual_seed(1000 + step + (7919 if phase != "tf" else 0))
    amp = device.type == "cuda" if amp is None else amp
    roll_frames = num_frames - num_frames % n  # whole blocks
    if rollout_blocks is not None:
        roll_frames = min(roll_frames, rollout_blocks * n)
        if roll_frames < clip_frames:
            raise ValueError(
                f"rollouts of {rollout_blocks} blocks ({roll_frames} frames) cannot hold a {clip_frames}-frame clip"
            )
    t0, last_log, ema, roll_ema = time.time(), 0.0, None, None
    t_first: float | None = None  # when the first step ended (the LR schedule's clock starts there)
    cached: tuple | None = None
    uses, rollouts, rollout_s = 0, 0, 0.0
    probes: list[dict] = []

    def run_probe() -> None:
        r = probe(model)
        probes.append({"step": step, "t": round(time.time() - t0, 1), **r})
        log(f"{phase} probe at step {step}: PSNR {r['psnr']:.2f} dB, by half-second {r['psnr_per_half_second']}")

    if probe is not None:
        run_probe()
    last_probe = time.time()
    while step < max_steps and time.time() - t0 < time_budget_s:
        if pool.refresh() < min(min_ready, pool.latents.shape[0]):
            time.sleep(0.5)
            continue
        progress = schedule_progress(step - first, max_steps - first, time.time(), t0, t_first, time_budget_s)
        for g in opt.param_groups:
            g["lr"] = _lr(lr, step - first, progress, 200 if phase == "tf" else 50)
        use_rollout = rollout_share > 0 and torch.rand((), generator=gen).item() < rollout_share
        if use_rollout:
            if cached is None or uses >= rollout_reuse:
                idx = pool.sample(batch, gen)
                truth = pool.latents[idx, :roll_frames].float()
                act = eye[pool.actions[idx, :roll_frames]]
                was, t_roll = model.training, time.time()
                model.eval()
                own = rollout(model, sampling, cache, truth, act, pool.scene_ids[idx], n, seed=int(step))
                model.train(was)
                rollouts, rollout_s = rollouts + 1, rollout_s + time.time() - t_roll
                cached, uses = (truth, own, act, pool.scene_ids[idx]), 0
            truth, own, act, scenes = cached
            uses += 1
            s = n * int(torch.randint(0, (roll_frames - clip_frames) // n + 1, (), generator=gen))
            ctx_lat, tgt, a = own[:, s : s + clip_frames], truth[:, s : s + clip_frames], act[:, s : s + clip_frames]
        else:
            idx = pool.sample(batch, gen)
            # half the clips start at frame 0 (the first block of a run has no context), the rest anywhere
            starts = torch.randint(0, (num_frames - clip_frames) // n + 1, (batch,), generator=gen) * n
            starts = torch.where(torch.rand(batch, generator=gen) < 0.5, torch.zeros_like(starts), starts)
            frames = starts[:, None] + torch.arange(clip_frames)[None]  # (B, clip)
            rows = idx.cpu()[:, None].expand_as(frames)
            tgt = pool.latents[rows.to(device), frames.to(device)].float()
            ctx_lat, a, scenes = tgt, eye[pool.actions[rows.to(device), frames.to(device)]], pool.scene_ids[idx]
        loss = flow_loss(model, setup, ctx_lat, tgt, a, scenes, context_noise_max, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if t_first is None:
            t_first = time.time()
        if use_rollout:
            roll_ema = loss.item() if roll_ema is None else 0.95 * roll_ema + 0.05 * loss.item()
        else:
            ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if time.time() - last_log > 10 or step == max_steps:
            log(
                f"{phase} step {step} loss {loss.item():.4f} (tf ema {ema if ema is None else round(ema, 4)}, "
                f"rollout ema {roll_ema if roll_ema is None else round(roll_ema, 4)}) lr {opt.param_groups[0]['lr']:.2e}"
                f" ({len(pool.ready)} episodes ready, {rollouts} rollouts in {rollout_s:.0f}s, {time.time() - t0:.0f}s)"
            )
            last_log = time.time()
        if ckpt.due(step):
            ckpt.save(model, opt, step, ema=ema, roll_ema=roll_ema)
        if probe is not None and time.time() - last_probe >= probe_every_s:
            run_probe()
            last_probe = time.time()
    if probe is not None and step > first and probes[-1]["step"] != step:
        run_probe()
    if step > first:
        ckpt.save(model, opt, step, ema=ema, roll_ema=roll_ema)
    seconds = time.time() - t0
    log(
        f"{phase} done: {step - first} steps in {seconds:.0f}s (total {step}), tf ema {ema}, rollout ema {roll_ema}, "
        f"{rollouts} rollouts of {batch} episodes in {rollout_s:.0f}s"
    )
    return {
        "steps": step,
        "loss_ema": ema,
        "rollout_loss_ema": roll_ema,
        "seconds": round(seconds, 1),
        "rollouts": rollouts,
        "rollout_seconds": round(rollout_s, 1),
        "rollout_frames": roll_frames if rollout_share > 0 else None,
        "probes": probes,
    }
