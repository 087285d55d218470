"""End to end: render episodes → train the autoencoder → encode → train the world model → export.

    python -m training.train_bundled --out OUT --work WORK              # full run (one H200: ~9 min)
    python -m training.train_bundled --out OUT --work WORK --smoke      # CPU smoke test, seconds
    python -m training.train_bundled ... --resume                       # continue from WORK's checkpoints

Every phase has a step cap and a wall-clock budget; checkpoints go to WORK every N steps and the
exported weights (`transformer.safetensors`, `vae.safetensors`, `config.json`, `train_log.txt`) to
OUT. Copy OUT's files into inferix_core/assets/bundled/ to ship them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from inferix_core.models.wan.config import WanConfig
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE
from inferix_core.world import ACTION_NAMES, FPS

from .checkpoint import Checkpointer
from .data import DatasetSpec, RenderJob
from .train_ae import encode_dataset, latent_stats, train_ae
from .train_world import train_world

SAMPLING = {
    "denoising_steps": [1000, 750, 500, 250],
    "warp_denoising_steps": True,
    "shift": 5.0,
    "num_train_timesteps": 1000,
    "block_frames": 3,
    "context_noise": 0,
}
CACHE = {"window_frames": 12, "sink_frames": 0}


def wan_config(smoke: bool) -> WanConfig:
    if smoke:
        return WanConfig(
            dim=32,
            ffn_dim=64,
            freq_dim=16,
            text_dim=8,
            text_len=2,
            num_heads=2,
            num_layers=1,
            action_dim=len(ACTION_NAMES),
        )
    return WanConfig(
        dim=256,
        ffn_dim=768,
        freq_dim=128,
        text_dim=32,
        text_len=4,
        num_heads=4,
        num_layers=8,
        action_dim=len(ACTION_NAMES),
    )


def export(out: Path, world, ae: TinyCausalAE, wcfg: WanConfig, info: dict) -> None:
    """Write the shippable files: fp16 safetensors with canonical Wan names, plus config.json."""
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().half().cpu().contiguous() for k, v in world.transformer.state_dict().items()}
    sd["bundled_context"] = world.bundled_context.detach().half().cpu().contiguous()
    save_file(sd, str(out / "transformer.safetensors"), metadata={"config": json.dumps(wcfg.to_dict())})
    vsd = {k: v.detach().half().cpu().contiguous() for k, v in ae.state_dict().items()}
    save_file(vsd, str(out / "vae.safetensors"), metadata={"config": json.dumps(ae.config.to_dict())})
    config = {
        "family": "bundled_world",
        "description": "Action-conditioned causal Wan world model of the procedural driving world (inferix_core.world)",
        "transformer": {k: v for k, v in wcfg.to_dict().items() if k != "extra"},
        "vae": {"type": "tiny_causal_ae", "config": ae.config.to_dict()},
        "sampling": SAMPLING,
        "cache": CACHE,
        "actions": list(ACTION_NAMES),
        "action_names": list(ACTION_NAMES),
        "fps": FPS,
        "height": 64,
        "width": 64,
        "latent_height": 8,
        "latent_width": 8,
        "weights_dtype": "float16",
        "compute_dtype": "float32",
        "training": info,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the exported weights and logs go")
    p.add_argument("--work", type=Path, required=True, help="data and checkpoints (resumable)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps, CPU: checks the whole path")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --work")
    p.add_argument("--episodes", type=int, default=3072)
    p.add_argument("--ae-steps", type=int, default=8000)
    p.add_argument("--ae-time", type=float, default=140.0, help="autoencoder wall-clock budget, seconds")
    p.add_argument("--world-steps", type=int, default=20000)
    p.add_argument("--world-time", type=float, default=320.0, help="transformer wall-clock budget, seconds")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--ckpt-every", type=int, default=500)
    p.add_argument("--workers", type=int, default=None)
    args = p.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if args.smoke:
        args.episodes, args.ae_steps, args.world_steps, args.batch = 4, 3, 3, 2
    args.out.mkdir(parents=True, exist_ok=True)
    log_file = (args.out / "train_log.txt").open("a")
    t_start = time.time()

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    # 1. render (in the background while the autoencoder trains); fork the workers before CUDA starts
    spec = DatasetSpec(num_episodes=args.episodes, num_latent_frames=6 if args.smoke else 24)
    job = RenderJob(args.work / "data", spec, workers=args.workers, chunk=1 if args.smoke else 16)
    log(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), args {vars(args)}")
    # 2. autoencoder
    ae_cfg = TinyAEConfig(latent_channels=32, num_res_blocks=1, pixel_channels=(8, 8)) if args.smoke else TinyAEConfig()
    ae = train_ae(
        lambda: (job.frames(), job.ready_episodes()),
        ae_cfg,
        device,
        Checkpointer(args.work / "ae.pt", args.ckpt_every, args.resume),
        args.ae_steps,
        args.ae_time,
        batch=8 if args.smoke else 64,
        log=log,
    )
    job.wait()
    log(f"rendering done ({spec.num_episodes} episodes x {spec.num_frames} frames)")
    frames = job.frames()
    mean, std = latent_stats(ae, frames, torch.arange(min(256, spec.num_episodes)).numpy(), device)
    ae_cfg = TinyAEConfig(**{**ae_cfg.__dict__, "latent_mean": tuple(mean), "latent_std": tuple(std)})
    trained = ae.state_dict()
    ae = TinyCausalAE(ae_cfg).to(device)
    ae.load_state_dict(trained)
    ae.eval()
    # 3. encode every episode
    latents = encode_dataset(ae, frames, device)
    actions = torch.from_numpy(job.actions)
    log(f"encoded latents {tuple(latents.shape)}; mean {latents.float().mean():.3f} std {latents.float().std():.3f}")
    # 4. world model
    wcfg = wan_config(args.smoke)
    world = train_world(
        latents,
        actions,
        wcfg,
        device,
        Checkpointer(args.work / "world.pt", args.ckpt_every, args.resume),
        args.world_steps,
        args.world_time,
        batch=args.batch,
        window_frames=CACHE["window_frames"],
        log=log,
    )
    # 5. export
    info = {
        "command": "python -m training.train_bundled " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": str(device),
        "episodes": spec.num_episodes,
        "episode_latent_frames": spec.num_latent_frames,
        "world_steps": world.steps,
        "world_final_loss_ema": world.final_loss,
        "total_seconds": round(time.time() - t_start, 1),
    }
    export(args.out, world.cpu().float(), ae.cpu().float(), wcfg, info)
    log(f"exported to {args.out}: {info}")


if __name__ == "__main__":
    main()
