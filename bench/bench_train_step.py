"""How fast the bundled world model trains per minute: one training step and one rollout, per variant.

Issue #23's fidelity bar needs a recipe that trains more in its 25 minutes, not more minutes
(docs/world_model.md). This measures the two costs a recipe spends its minutes on, at the shipped
model's sizes (`train_bundled.wan_config`, 96² → 12×12 latents, 18-frame clips, window 12) on random
latents: a teacher-forcing step (flow loss, backward, clipping, AdamW) and a batch of 4-block rollouts
through the inference pipeline (what the rollout phase generates). Variants: `eager` (as trained now,
bf16 autocast, TF32) and `compile` (`compile_blocks` on the transformer, for both). CUDA events after
warm-up, medians; one JSON row per (variant, batch).

    PYTHONPATH=. python bench/bench_train_step.py --device cuda --variants eager,compile --batches 64,128 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.models.wan.causal_transformer import compile_blocks
from inferix_core.scheduler import SamplingConfig
from inferix_core.text.vocabulary import VocabularyConfig
from training.data import scene_word_lists
from training.train_bundled import CACHE, SAMPLING, TEXT_LEN, wan_config
from training.train_world import FlowSetup, WorldModel, flow_loss, rollout
from training.world import ACTION_NAMES


def _timer(device: torch.device):
    """Seconds of `fn()` by CUDA events on a GPU (synchronised), by the wall clock on the CPU."""

    def run(fn) -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run


def bench_variant(variant: str, batch: int, args: argparse.Namespace, device: torch.device) -> dict:
    torch.manual_seed(0)
    scenes = ("day", "sunset", "night")
    words = scene_word_lists(scenes)
    vocab = VocabularyConfig.from_scenes(words, max(TEXT_LEN, max(len(w) for w in words.values())), default="day")
    smoke = args.smoke
    cfg = wan_config(smoke, vocab.text_len)
    model = WorldModel(cfg, vocab).to(device)
    if variant == "compile":
        compile_blocks(model.transformer)
    sampling = SamplingConfig(**SAMPLING)
    cache = KVCacheConfig(**CACHE) if not smoke else KVCacheConfig(window_frames=6, sink_frames=0)
    clip, hw = args.clip_frames, args.latent_size
    setup = FlowSetup.build(cfg, sampling, cache, clip, (hw, hw), device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, betas=(0.9, 0.99))
    eye = torch.eye(cfg.action_dim, device=device)
    amp = device.type == "cuda"
    timed = _timer(device)

    def batch_inputs(frames: int):
        lat = torch.randn(batch, frames, cfg.in_dim, hw, hw, device=device)
        act = eye[torch.randint(0, cfg.action_dim, (batch, frames), device=device)]
        return lat, act, torch.randint(0, len(scenes), (batch,), device=device)

    lat, act, ids = batch_inputs(clip)

    def step() -> None:
        loss = flow_loss(model, setup, lat, lat, act, ids, 0.1, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        assert torch.isfinite(loss), "the training step's loss is not finite"

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    warm_s = time.perf_counter() - t0
    steps = [timed(step) for _ in range(args.steps)]
    roll_frames = args.rollout_blocks * sampling.block_frames
    truth, ract, rids = batch_inputs(roll_frames)
    model.eval()

    def roll() -> None:
        own = rollout(model, sampling, cache, truth, ract, rids, sampling.block_frames, seed=1)
        assert own.shape == truth.shape and torch.isfinite(own).all()

    roll()  # warm-up (compiles the inference shapes)
    rolls = [timed(roll) for _ in range(args.rollouts)]
    step_s, roll_s = statistics.median(steps), statistics.median(rolls)
    return {
        "variant": variant,
        "batch": batch,
        "step_ms": round(step_s * 1e3, 2),
        "steps_per_s": round(1 / step_s, 2),
        "clips_per_s": round(batch / step_s, 1),
        "rollout_ms": round(roll_s * 1e3, 1),
        "rollout_blocks": args.rollout_blocks,
        "warmup_s": round(warm_s, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--variants", default="eager,compile", help="comma list of eager, compile")
    p.add_argument("--batches", default="64", help="comma list of batch sizes")
    p.add_argument("--clip-frames", type=int, default=18)
    p.add_argument("--latent-size", type=int, default=12, help="latent height = width (96² frames: 12)")
    p.add_argument("--rollout-blocks", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="the smoke test's tiny model (CPU tests)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    for v in args.variants.split(","):
        if v not in ("eager", "compile"):
            raise SystemExit(f"error: unknown variant {v!r}; use eager or compile")
    rows = []
    print(f"{'variant':8} {'batch':>5} {'step ms':>8} {'steps/s':>8} {'clips/s':>8} {'rollout ms':>10} {'peak GiB':>8}")
    for v in args.variants.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            r = bench_variant(v, b, args, device)
            rows.append(r)
            print(
                f"{v:8} {b:5d} {r['step_ms']:8.2f} {r['steps_per_s']:8.2f} {r['clips_per_s']:8.1f} "
                f"{r['rollout_ms']:10.1f} {r['peak_gib'] if r['peak_gib'] is not None else '-':>8}",
                flush=True,
            )
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"device": str(device), "actions": list(ACTION_NAMES), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
