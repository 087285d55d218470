"""Measure the bundled world model against the renderer: fidelity, drift, action response, CPU speed.

    python -m training.evaluate [--episodes 8] [--threads 2] [--random]

Rollouts run through the engine's BlockDiffusionPipeline with the bundled config (window, sampling),
starting from one true block (3 latent frames = 9 pixel frames, encoded with the autoencoder) and
following the held-out episode's actions; frames are decoded with the streaming decoder.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from inferix_core.models.bundled import BundledWorldModel, load_bundled
from inferix_core.pipeline.block_diffusion import BlockDiffusionPipeline, GenerationRequest
from inferix_core.world import latent_to_pixel_actions, render_episode
from inferix_core.world.compare import horizontal_shift, psnr, ssim
from inferix_core.world.road import LEFT, NONE, RIGHT

from .data import episode_actions, episode_seed

EVAL_SEED = 1  # held-out: training episodes use seed 0


def to_uint8(pixels: torch.Tensor) -> np.ndarray:
    """(B=1, 3, T, H, W) in [-1, 1] → uint8 (T, H, W, 3)."""
    return ((pixels[0].permute(1, 2, 3, 0).float().clamp(-1, 1) + 1) * 127.5 + 0.5).byte().numpy()


def rollout(
    bundle: BundledWorldModel, world_seed: int, latent_actions: np.ndarray, prefix_blocks: int = 1, noise_seed: int = 0
) -> tuple[np.ndarray, float]:
    """Generate len(latent_actions) latent frames (the first prefix_blocks·3 given from the truth).

    Returns (frames uint8 [T, H, W, 3] including the decoded prefix, seconds spent).
    """
    cfg = bundle.config
    n = cfg["sampling"]["block_frames"]
    num_prefix = prefix_blocks * n
    truth_prefix = render_episode(world_seed, latent_to_pixel_actions(latent_actions[:num_prefix]))
    video = torch.from_numpy(truth_prefix).permute(3, 0, 1, 2).unsqueeze(0).float() / 127.5 - 1
    t0 = time.perf_counter()
    initial = bundle.vae.encode(video).permute(0, 2, 1, 3, 4) if num_prefix else None  # (1, F0, C, h, w)
    pipe = BlockDiffusionPipeline(bundle.transformer, bundle.sampling_config(), bundle.cache_config())
    req = GenerationRequest(
        num_blocks=(len(latent_actions) - num_prefix) // n,
        latent_height=cfg["latent_height"],
        latent_width=cfg["latent_width"],
        context=bundle.context,
        seed=noise_seed,
        actions=bundle.one_hot(latent_actions),
        initial_latents=initial,
    )
    decoder = bundle.vae.stream_decoder()
    frames = [decoder.decode(out.latents.permute(0, 2, 1, 3, 4)) for out in pipe.stream(req)]
    pixels = torch.cat(frames, dim=2)
    return to_uint8(pixels), time.perf_counter() - t0


def fidelity(bundle: BundledWorldModel, episodes: int, seconds: float = 2.0) -> dict:
    """Per-frame PSNR/SSIM vs. the true rendering of the same actions, over the first `seconds` after the prefix."""
    fps = bundle.config["fps"]
    num_latent = 3 + 3 * int(np.ceil(seconds * fps / 12))
    ps, ss, ae_ps = [], [], []
    for i in range(episodes):
        lat = episode_actions(EVAL_SEED, i, num_latent)
        truth = render_episode(episode_seed(EVAL_SEED, i), latent_to_pixel_actions(lat))
        gen, _ = rollout(bundle, episode_seed(EVAL_SEED, i), lat, noise_seed=i)
        sl = slice(9, 9 + int(seconds * fps))  # generated frames only
        ps.append(psnr(gen[sl], truth[sl]))
        ss.append(ssim(gen[sl], truth[sl]))
        video = torch.from_numpy(truth).permute(3, 0, 1, 2).unsqueeze(0).float() / 127.5 - 1
        ae_ps.append(psnr(to_uint8(bundle.vae.decode(bundle.vae.encode(video)))[sl], truth[sl]))
    ps, ss = np.stack(ps), np.stack(ss)
    return {
        "psnr_mean": float(ps.mean()),
        "ssim_mean": float(ss.mean()),
        "psnr_per_half_second": [float(ps[:, a : a + fps // 2].mean()) for a in range(0, ps.shape[1], fps // 2)],
        "ssim_per_half_second": [float(ss[:, a : a + fps // 2].mean()) for a in range(0, ss.shape[1], fps // 2)],
        "autoencoder_psnr_mean": float(np.mean(ae_ps)),
        "episodes": episodes,
        "seconds": seconds,
    }


def drift(bundle: BundledWorldModel, seconds: int = 60, index: int = 100) -> dict:
    """Per-second mean/std of generated vs. true frames over a long rollout (collapse or blow-up shows here)."""
    fps = bundle.config["fps"]
    num_latent = 3 * int(np.ceil((seconds * fps / 4 + 1) / 3))
    lat = episode_actions(EVAL_SEED, index, num_latent)
    truth = render_episode(episode_seed(EVAL_SEED, index), latent_to_pixel_actions(lat))
    gen, secs = rollout(bundle, episode_seed(EVAL_SEED, index), lat, noise_seed=index)
    per = []
    for s in range(seconds):
        g, t = gen[s * fps : (s + 1) * fps].astype(np.float64), truth[s * fps : (s + 1) * fps].astype(np.float64)
        per.append(
            {
                "second": s,
                "gen_mean": round(g.mean(), 1),
                "gen_std": round(g.std(), 1),
                "true_mean": round(t.mean(), 1),
                "true_std": round(t.std(), 1),
                "frame_to_frame_psnr": round(
                    float(psnr(gen[s * fps + 1 : (s + 1) * fps], gen[s * fps : (s + 1) * fps - 1]).mean()), 1
                ),
            }
        )
    # LV-Bench drift (VDE) over 10 chunks with the weight-free proxies, for the rollout and for the truth:
    # the truth's VDE is the drift the world itself has, so the model's excess over it is its own drift
    from inferix_core.metrics import score_video

    lvbench = {
        name: score_video(frames, fps=fps, name=name).scores()
        for name, frames in (("generated", gen), ("truth", truth[: len(gen)]))
    }
    return {
        "seconds": seconds,
        "rollout_seconds_cpu": round(secs, 1),
        "per_second": per,
        "lvbench": lvbench,
        "max_abs_mean_diff": max(abs(p["gen_mean"] - p["true_mean"]) for p in per),
        "min_gen_std": min(p["gen_std"] for p in per),
        "max_gen_std": max(p["gen_std"] for p in per),
    }


def action_response(bundle: BundledWorldModel, episodes: int, steer_blocks: int = 4) -> dict:
    """Same start, steer_left vs steer_right vs none: horizontal shift of the ground rows vs. the 'none' rollout.

    The road moves right on screen when the car steers left. Reported per episode at the end of the
    steer (steer_blocks·12 frames = 3 s for 4 blocks), for the model and for the true renderer.
    """
    left, right, none = LEFT, RIGHT, NONE
    rows = slice(30, 52)  # ground rows between the horizon and the car (64-pixel frames)
    out = {"model_left": [], "model_right": [], "true_left": [], "true_right": []}
    for i in range(episodes):
        base = episode_actions(EVAL_SEED, 200 + i, 3)
        seqs = {
            name: np.concatenate([base, np.full(3 * steer_blocks, a)])
            for name, a in (("left", left), ("right", right), ("none", none))
        }
        gen = {k: rollout(bundle, episode_seed(EVAL_SEED, 200 + i), v, noise_seed=7)[0] for k, v in seqs.items()}
        tru = {k: render_episode(episode_seed(EVAL_SEED, 200 + i), latent_to_pixel_actions(v)) for k, v in seqs.items()}
        for k in ("left", "right"):
            out[f"model_{k}"].append(horizontal_shift(gen[k][-1], gen["none"][-1], rows))
            out[f"true_{k}"].append(horizontal_shift(tru[k][-1], tru["none"][-1], rows))
    agree = [np.sign(m) == np.sign(t) for k in ("left", "right") for m, t in zip(out[f"model_{k}"], out[f"true_{k}"])]
    out["sign_agreement"] = float(np.mean(agree))
    return out


def speed(bundle: BundledWorldModel, seconds: float = 10.0) -> dict:
    """Wall time of the quickstart path: from scratch, generate + stream-decode ≥ `seconds` of video."""
    fps, n = bundle.config["fps"], bundle.config["sampling"]["block_frames"]
    num_latent = n * int(np.ceil((seconds * fps / 4 + 1) / n))
    lat = episode_actions(EVAL_SEED, 300, num_latent)
    t0 = time.perf_counter()
    pipe = BlockDiffusionPipeline(bundle.transformer, bundle.sampling_config(), bundle.cache_config())
    req = GenerationRequest(
        num_blocks=num_latent // n,
        latent_height=bundle.config["latent_height"],
        latent_width=bundle.config["latent_width"],
        context=bundle.context,
        seed=0,
        actions=bundle.one_hot(lat),
    )
    decoder, t_model, t_dec, frames = bundle.vae.stream_decoder(), 0.0, 0.0, 0
    for out in pipe.stream(req):
        t_model += out.seconds
        t1 = time.perf_counter()
        frames += decoder.decode(out.latents.permute(0, 2, 1, 3, 4)).shape[2]
        t_dec += time.perf_counter() - t1
    total = time.perf_counter() - t0
    return {
        "frames": frames,
        "video_seconds": frames / fps,
        "total_s": round(total, 2),
        "transformer_s": round(t_model, 2),
        "decode_s": round(t_dec, 2),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--random", action="store_true", help="random transformer weights (the baseline)")
    p.add_argument("--only", nargs="*", default=["speed", "fidelity", "action", "drift"])
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    bundle = load_bundled(random_transformer=args.random)
    results = {}
    with torch.inference_mode():
        for name, fn in (
            ("speed", lambda: speed(bundle)),
            ("fidelity", lambda: fidelity(bundle, args.episodes)),
            ("action", lambda: action_response(bundle, args.episodes)),
            ("drift", lambda: drift(bundle)),
        ):
            if name in args.only:
                results[name] = fn()
                print(json.dumps({name: results[name]}), flush=True)


if __name__ == "__main__":
    main()
