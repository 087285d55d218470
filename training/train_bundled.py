"""End to end: render episodes → autoencoder → teacher forcing → rollout training (→ focus rollouts) → export.

    python -m training.train_bundled --out OUT --work WORK                    # everything in one process
    python -m training.train_bundled --out OUT --work WORK --smoke            # CPU smoke test, < 60 s
    python -m training.train_bundled ... --resume                             # continue from WORK's checkpoints

The shipped run is two device calls of at most ~9.5 minutes each, on fresh machines (WORK is lost):

    # call 1: render + autoencoder + teacher forcing; writes OUT/resume/* and OUT/train_log.txt
    python -m training.train_bundled --out $OUT --work /tmp/work --until tf --budget-seconds 480
    # call 2: render again (deterministic) + rollout phase + export, from the files call 1 wrote
    python -m training.train_bundled --out $OUT --work /tmp/work --resume-from DIR --budget-seconds 480

Or one process for the whole run, started detached so that it outlives time-limited calls (training/detached_run.sh),
with a last phase of 4-block rollouts where the fidelity bar scores (docs/world_model.md, "A from-scratch run"):

    python -m training.train_bundled --out OUT --work WORK --budget-seconds 1300 --tf-time 430 \
        --rollout-time 230 --focus-time 470 --focus-blocks 4 --focus-clip-frames 12

Every phase has a step cap and a wall-clock budget (the call's `--budget-seconds` caps them all);
full checkpoints (with the optimiser) go to WORK every N steps, and at the end of each phase its weights
go to OUT/resume (fp32 safetensors shards ≤ 15 MiB, state.json). The exported weights
(`transformer.safetensors` + `bundled_vocabulary`, `vae.safetensors`, `config.json`, `train_log.txt`,
fp16) go to OUT; copy them into inferix_core/assets/bundled/ to ship them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.models.wan.causal_transformer import compile_blocks
from inferix_core.models.wan.config import WanConfig
from inferix_core.scheduler import SamplingConfig
from inferix_core.text.vocabulary import VocabularyConfig
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE
from training.world import ACTION_NAMES, FPS

from .checkpoint import Checkpointer, load_carry, save_carry
from .data import DatasetSpec, LatentPool, RenderJob, scene_word_lists
from .probe import PROBE_SEED, FidelityProbe, probe_spec
from .settings import CACHE, SAMPLING
from .train_ae import latent_stats, to_video, train_ae
from .train_world import WorldModel, train_world

SMOKE_CACHE = {"window_frames": 6, "sink_frames": 0}
# What the exported config runs: the same window with the first block (3 latent frames) kept as a sink. Measured
# after training (docs/world_model.md, "The sink"): chosen on a tuning seed, confirmed on the evaluation seed, the
# 5-minute proxy VDE falls below the renderer's own in every scene, with the frame-to-frame motion of the truth
# and the first 2 s unchanged (the window still holds the whole start).
INFERENCE_CACHE = {**CACHE, "sink_frames": 3}
SMOKE_INFERENCE_CACHE = {**SMOKE_CACHE, "sink_frames": 3}
TEXT_LEN = 4


def wan_config(smoke: bool, text_len: int) -> WanConfig:
    if smoke:
        return WanConfig(
            dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=text_len, num_heads=2, num_layers=1,
            action_dim=len(ACTION_NAMES),
        )  # fmt: skip
    return WanConfig(
        dim=256, ffn_dim=768, freq_dim=128, text_dim=32, text_len=text_len, num_heads=4, num_layers=8,
        action_dim=len(ACTION_NAMES),
    )  # fmt: skip


def export(
    out: Path, world: WorldModel, ae: TinyCausalAE, wcfg: WanConfig, spec: DatasetSpec, cache: dict, info: dict
) -> None:
    """Write the shippable files: fp16 safetensors with canonical Wan names, plus config.json."""
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().half().cpu().contiguous() for k, v in world.transformer.state_dict().items()}
    sd["bundled_vocabulary"] = world.prompt.table.detach().half().cpu().contiguous()
    save_file(sd, str(out / "transformer.safetensors"), metadata={"config": json.dumps(wcfg.to_dict())})
    vsd = {k: v.detach().half().cpu().contiguous() for k, v in ae.state_dict().items()}
    save_file(vsd, str(out / "vae.safetensors"), metadata={"config": json.dumps(ae.config.to_dict())})
    config = {
        "family": "bundled_world",
        "version": 2,
        "description": "Action- and prompt-conditioned causal Wan world model of the procedural driving world "
        "(training.world)",
        "transformer": {k: v for k, v in wcfg.to_dict().items() if k != "extra"},
        "vae": {"type": "tiny_causal_ae", "config": ae.config.to_dict()},
        "sampling": SAMPLING,
        "cache": cache,
        "actions": list(ACTION_NAMES),
        "action_names": list(ACTION_NAMES),
        "prompt": world.prompt.config.to_dict(),
        "world": "road",  # the renderer it was trained on (training/evaluate.py renders the truth with it)
        "world_spec": dataclasses.asdict(spec.world_spec),  # its constants (evaluate renders with them)
        "scenes": list(spec.scenes),
        "fps": FPS,
        "height": spec.height,
        "width": spec.width,
        "latent_height": spec.height // 8,
        "latent_width": spec.width // 8,
        "weights_dtype": "float16",
        "compute_dtype": "float32",
        "training": info,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))


def _carry_dir(path: Path) -> Path:
    """The folder with state.json: DIR itself or DIR/resume (what the coordinator fetched back)."""
    for d in (path, path / "resume"):
        if (d / "state.json").exists():
            return d
    raise FileNotFoundError(f"{path} has no state.json (nor resume/state.json): pass the OUT folder of call 1")


def carry_from_bundle(bundle: Path, carry: Path) -> None:
    """Write an exported bundle as a carry whose autoencoder and teacher forcing are done, so that a further
    rollout phase starts from the shipped weights. The fp16 weights become fp32; the optimiser starts fresh,
    as it does in every call; the steps continue from the bundle's last one (`state["start_step"]`)."""
    from safetensors.torch import load_file

    config = json.loads((bundle / "config.json").read_text())
    training = config.get("training") or {}
    if config.get("family") != "bundled_world" or "teacher_forcing" not in training:
        raise SystemExit(f"error: {bundle} is not a bundle exported by training.train_bundled (config.json)")
    transformer = load_file(str(bundle / "transformer.safetensors"))
    world = {"prompt.table": transformer.pop("bundled_vocabulary")}
    world.update({f"transformer.{k}": v for k, v in transformer.items()})
    save_carry(carry, "world", world)
    save_carry(carry, "ae", load_file(str(bundle / "vae.safetensors")))
    last = training.get("focus") or training.get("rollout") or training["teacher_forcing"]
    state = {
        "done": ["ae", "tf"],
        "ae_config": config["vae"]["config"],
        "tf": training["teacher_forcing"],
        "start_step": last["steps"],
        "earlier_calls": [*training.get("earlier_calls", []), {k: training.get(k) for k in ("command", "rollout")}],
    }
    (carry / "state.json").write_text(json.dumps(state, indent=1))
    if (bundle / "train_log.txt").exists():
        shutil.copy(bundle / "train_log.txt", carry / "train_log.txt")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the exported weights, the carry and logs go")
    p.add_argument("--work", type=Path, required=True, help="rendered data and full checkpoints (resumable)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps, CPU: checks the whole path")
    p.add_argument("--resume", action="store_true", help="continue from the full checkpoints in --work")
    p.add_argument("--resume-from", type=Path, default=None, help="the OUT (or OUT/resume) of an earlier call")
    p.add_argument("--continue-from", type=Path, default=None,
                   help="an exported bundle: train a further rollout phase from its weights")  # fmt: skip
    p.add_argument("--until", choices=("ae", "tf", "all"), default="all", help="stop after this phase")
    p.add_argument("--budget-seconds", type=float, default=None, help="wall-clock cap of this call, all phases")
    p.add_argument("--episodes", type=int, default=3072)
    p.add_argument("--latent-frames", type=int, default=30, help="latent frames per episode (whole blocks)")
    p.add_argument("--size", type=int, default=96, help="frame height = width, a multiple of 16")
    p.add_argument("--stripe-len", type=float, default=None,
                   help="the world's stripe length (default: the renderer's, WorldSpec.stripe_len)")  # fmt: skip
    p.add_argument("--ae-steps", type=int, default=8000)
    p.add_argument("--ae-time", type=float, default=150.0, help="autoencoder wall-clock budget, seconds")
    p.add_argument("--tf-steps", type=int, default=20000)
    p.add_argument("--tf-time", type=float, default=420.0, help="teacher-forcing wall-clock budget, seconds")
    p.add_argument("--rollout-steps", type=int, default=20000)
    p.add_argument("--rollout-time", type=float, default=420.0, help="rollout-phase wall-clock budget, seconds")
    p.add_argument("--rollout-share", type=float, default=0.5, help="share of rollout steps in that phase")
    p.add_argument("--rollout-lr", type=float, default=1.5e-4, help="peak LR of the rollout phase (fresh AdamW)")
    p.add_argument("--rollout-blocks", type=int, default=None,
                   help="rollouts cover only the first N blocks of an episode (default: all of it)")  # fmt: skip
    p.add_argument("--clip-frames", type=int, default=18, help="latent frames per training clip")
    p.add_argument(
        "--focus-time",
        type=float,
        default=0.0,
        help="seconds of a last rollout phase on short rollouts where the fidelity bar scores (0: none)",
    )
    p.add_argument(
        "--focus-blocks", type=int, default=4, help="blocks per rollout of the focus phase (true one included)"
    )
    p.add_argument("--focus-clip-frames", type=int, default=12, help="latent frames per clip of the focus phase")
    p.add_argument("--focus-lr", type=float, default=1e-4, help="peak LR of the focus phase (fresh AdamW)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--compile", action="store_true",
                   help="compile the transformer's blocks for training and rollouts (~40 s to compile; at batch 128 "
                        "1.96x the clips per second of eager batch 64 on an H200, but a higher loss after a 170 s "
                        "phase: docs/world_model.md)")  # fmt: skip
    p.add_argument(
        "--probe-episodes",
        type=int,
        default=24,
        help="tuning-seed episodes the fidelity probe scores during training (0: no probe; training/probe.py)",
    )
    p.add_argument("--probe-every", type=float, default=30.0, help="seconds between fidelity probes within a phase")
    p.add_argument("--ckpt-every", type=int, default=500)
    p.add_argument("--workers", type=int, default=None)
    args = p.parse_args(argv)

    t_start = time.time()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cache = SMOKE_CACHE if args.smoke else CACHE
    if args.smoke:
        args.episodes, args.latent_frames, args.size, args.batch, args.clip_frames = 6, 9, 32, 2, 6
        args.ae_steps, args.tf_steps, args.rollout_steps, args.ckpt_every = 3, 3, 4, 2
        args.probe_episodes = min(args.probe_episodes, 2)
    block = SAMPLING["block_frames"]
    if args.rollout_blocks is not None and args.rollout_blocks * block < args.clip_frames:
        raise SystemExit(f"error: --rollout-blocks {args.rollout_blocks} cannot hold a {args.clip_frames}-frame clip")
    if args.focus_time > 0 and args.focus_blocks * block < args.focus_clip_frames:
        raise SystemExit(
            f"error: --focus-blocks {args.focus_blocks} cannot hold a {args.focus_clip_frames}-frame clip: "
            f"raise --focus-blocks to {-(-args.focus_clip_frames // block)} or lower --focus-clip-frames"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    if args.continue_from is not None:
        if args.resume_from is not None:
            raise SystemExit("error: pass --resume-from (a carry) or --continue-from (a bundle), not both")
        args.resume_from = args.work / "bundle_carry"
        carry_from_bundle(args.continue_from, args.resume_from)
    carry_in = _carry_dir(args.resume_from) if args.resume_from is not None else None
    log_path = args.out / "train_log.txt"
    if carry_in is not None and not log_path.exists():
        for old in (carry_in / "train_log.txt", carry_in.parent / "train_log.txt"):
            if old.exists():
                shutil.copy(old, log_path)
                break
    log_file = log_path.open("a")

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    def left(reserve: float = 25.0) -> float:
        if args.budget_seconds is None:
            return float("inf")
        return args.budget_seconds - (time.time() - t_start) - reserve

    state = json.loads((carry_in / "state.json").read_text()) if carry_in is not None else {"done": []}
    carry_out = args.out / "resume"

    def save_state() -> None:
        carry_out.mkdir(parents=True, exist_ok=True)
        (carry_out / "state.json").write_text(json.dumps(state, indent=1))

    # 1. render (in the background while the autoencoder trains); fork the workers before CUDA starts
    world_overrides = {} if args.stripe_len is None else {"stripe_len": args.stripe_len}
    spec = DatasetSpec(num_episodes=args.episodes, num_latent_frames=args.latent_frames, height=args.size,
                       width=args.size, world=world_overrides)  # fmt: skip
    job = RenderJob(args.work / "data", spec, workers=args.workers, chunk=1 if args.smoke else 8)
    probe_job = None
    if args.probe_episodes > 0:
        probe_data = probe_spec(spec, args.probe_episodes, SAMPLING["block_frames"], FPS)
        probe_job = RenderJob(args.work / "probe", probe_data, workers=args.workers, chunk=1 if args.smoke else 4)
    log(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), args {vars(args)}")
    log(f"phases done before this call: {state['done']}")
    words = scene_word_lists(spec.scenes)
    text_len = max(TEXT_LEN, max(len(w) for w in words.values()))
    vocab = VocabularyConfig.from_scenes(words, text_len, default=spec.scenes[0])
    wcfg = wan_config(args.smoke, text_len)
    sampling, cache_cfg = SamplingConfig(**SAMPLING), KVCacheConfig(**cache)

    # 2. autoencoder
    if "ae" in state["done"]:
        ae_cfg = TinyAEConfig.from_dict(state["ae_config"])
        ae = TinyCausalAE(ae_cfg)
        ae.load_state_dict(load_carry(carry_in, "ae"))
        ae = ae.to(device).eval()
        log("autoencoder loaded from the carry")
    else:
        if args.smoke:
            ae_cfg = TinyAEConfig(latent_channels=32, num_res_blocks=1, pixel_channels=(8, 8))
        else:
            ae_cfg = TinyAEConfig()
        ae = train_ae(
            lambda: (job.frames(), job.ready_episodes()),
            ae_cfg,
            device,
            Checkpointer(args.work / "ae.pt", args.ckpt_every, args.resume),
            args.ae_steps,
            min(args.ae_time, left()),
            batch=8 if args.smoke else 64,
            log=log,
        )
        ready = job.ready_episodes()
        mean, std = latent_stats(ae, job.frames(), ready[: min(256, len(ready))], device)
        ae_cfg = TinyAEConfig(**{**ae_cfg.__dict__, "latent_mean": tuple(mean), "latent_std": tuple(std)})
        trained = ae.state_dict()
        ae = TinyCausalAE(ae_cfg).to(device)
        ae.load_state_dict(trained)
        ae.eval()
        save_carry(carry_out, "ae", ae.state_dict())
        state["ae_config"] = ae_cfg.to_dict()
        state["done"].append("ae")
        save_state()
        log(f"autoencoder saved to {carry_out}; latent std range {min(std):.3f}..{max(std):.3f}")
    if args.until == "ae":
        job.wait()
        log("stopping after the autoencoder (--until ae)")
        return

    # 3. the encoded dataset, growing while rendering goes on
    def encode(frames) -> torch.Tensor:
        with torch.no_grad():
            return ae.encode(to_video(frames, device)).permute(0, 2, 1, 3, 4).half()

    probe = None
    if probe_job is not None:
        probe = FidelityProbe.build(probe_job, ae, sampling, cache_cfg, wcfg.action_dim, device, FPS)
        log(f"fidelity probe: {args.probe_episodes} episodes of seed {PROBE_SEED}, every {args.probe_every:.0f} s")
    lat_hw = (spec.height // 8, spec.width // 8)
    pool = LatentPool(job, encode, (ae_cfg.z_dim, *lat_hw), device)
    world = WorldModel(wcfg, vocab).to(device)
    if carry_in is not None and "tf" in state["done"]:
        world.load_state_dict(load_carry(carry_in, "world"))
        log("world model loaded from the carry")
    if args.compile:
        compile_blocks(world.transformer)  # in place: state_dict keys, checkpoints and the export are unchanged
        log("transformer blocks compiled (compile_blocks); the first steps of each shape compile")

    # 4. teacher forcing
    if "tf" not in state["done"]:
        rec = train_world(
            pool, world, sampling, cache_cfg, device, Checkpointer(args.work / "tf.pt", args.ckpt_every, args.resume),
            args.tf_steps, min(args.tf_time, left()), batch=args.batch, clip_frames=args.clip_frames, phase="tf",
            log=log, probe=probe, probe_every_s=args.probe_every,
        )  # fmt: skip
        save_carry(carry_out, "world", world.state_dict())
        state["tf"] = rec
        state["done"].append("tf")
        save_state()
    if args.until == "tf":
        job.wait()
        log(f"stopping after teacher forcing (--until tf); carry in {carry_out}")
        return

    # 5. rollouts on the model's own KV-cache generations
    if "rollout" not in state["done"]:
        start = state.get("start_step", state["tf"]["steps"])
        rec = train_world(
            pool, world, sampling, cache_cfg, device,
            Checkpointer(args.work / "rollout.pt", args.ckpt_every, args.resume),
            start + args.rollout_steps, min(args.rollout_time, left(40.0)), batch=args.batch, lr=args.rollout_lr,
            clip_frames=args.clip_frames, rollout_share=args.rollout_share, rollout_blocks=args.rollout_blocks,
            start_step=start, phase="rollout", log=log, probe=probe, probe_every_s=args.probe_every,
        )  # fmt: skip
        state["rollout"] = rec
        state["done"].append("rollout")

    # 6. focus: rollouts of the first few blocks only, the situation the fidelity bar scores (the shipped calls 3
    # and 4 did this as continuations; here it is the same run's last phase)
    if args.focus_time > 0 and "focus" not in state["done"]:
        rec = train_world(
            pool, world, sampling, cache_cfg, device,
            Checkpointer(args.work / "focus.pt", args.ckpt_every, args.resume),
            state["rollout"]["steps"] + args.rollout_steps, min(args.focus_time, left(40.0)), batch=args.batch,
            lr=args.focus_lr, clip_frames=args.focus_clip_frames, rollout_share=args.rollout_share,
            rollout_blocks=args.focus_blocks, start_step=state["rollout"]["steps"], phase="focus", log=log,
            probe=probe, probe_every_s=args.probe_every,
        )  # fmt: skip
        state["focus"] = rec
        state["done"].append("focus")
    job.wait()

    # 7. export (the carry is no longer needed: it moves to WORK, so OUT holds just the shippable files)
    info = {
        "command": "python -m training.train_bundled " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": str(device),
        "episodes": spec.num_episodes,
        "episode_latent_frames": spec.num_latent_frames,
        "scenes": list(spec.scenes),
        "clip_frames": args.clip_frames,
        "teacher_forcing": state.get("tf"),
        "rollout": state.get("rollout"),
        "rollout_share": args.rollout_share,
        "rollout_blocks": args.rollout_blocks,
        "focus": state.get("focus"),
        "focus_blocks": args.focus_blocks if state.get("focus") else None,
        "focus_clip_frames": args.focus_clip_frames if state.get("focus") else None,
        "earlier_calls": state.get("earlier_calls", []),
        "seconds_this_call": round(time.time() - t_start, 1),
    }
    inference_cache = SMOKE_INFERENCE_CACHE if args.smoke else INFERENCE_CACHE
    export(args.out, world.cpu().float(), ae.cpu().float(), wcfg, spec, inference_cache, info)
    if carry_out.exists():
        shutil.rmtree(args.work / "resume_final", ignore_errors=True)
        shutil.move(str(carry_out), str(args.work / "resume_final"))
    log(f"exported to {args.out}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
