"""Compare inference settings of one bundle on a tuning seed: how the shipped sink (docs/world_model.md) was chosen.

The weights stay as they are; each variant overrides the bundle's `cache` or `sampling` config and runs the
evaluation's own parts (training/evaluate.py) on episodes of `--seed`, which must be neither training's (0) nor
the evaluation's (`EVAL_SEED`), so a choice made here is then measured, not fitted, by `training.evaluate`. Per
variant: first-2-s PSNR/SSIM, steering sign agreement, and for each `--scenes` rollout of `--minutes` the palette
agreement, the proxy VDE ratios (model / truth) and, over the rollout's last minute, the mean frame-to-frame change
and mean luma of model and truth (a rollout that froze would pass the VDE rows with a motion near 0).

    python -m training.tune_inference --threads 2 --json tune.json          # the table in docs/world_model.md
    python -m training.tune_inference --threads 2 --variants steps3,steps2,steps1 --minutes 1
    python -m training.tune_inference --threads 2 --variants nosink,sink3 --seed 1 --on-evaluation-seed \
        --scenes day sunset night                                            # the motion check (sunset: episode 101)
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from inferix_core.models.bundled import BundledWorldModel, load_bundled

from . import evaluate as ev

VARIANTS: dict[str, dict] = {
    "base": {},
    "sink3": {"cache": {"sink_frames": 3}},
    "nosink": {"cache": {"sink_frames": 0}},
    "win15": {"cache": {"window_frames": 15, "sink_frames": 0}},
    # the rest against the config first shipped (no sink), as the table in docs/world_model.md measured them
    "ctx25": {"cache": {"sink_frames": 0}, "sampling": {"context_noise": 25}},
    "ctx50": {"cache": {"sink_frames": 0}, "sampling": {"context_noise": 50}},
    "steps3": {"cache": {"sink_frames": 0}, "sampling": {"denoising_steps": [1000, 750, 500]}},
    "steps3b": {"cache": {"sink_frames": 0}, "sampling": {"denoising_steps": [1000, 500, 250]}},
    "steps2": {"cache": {"sink_frames": 0}, "sampling": {"denoising_steps": [1000, 500]}},
    "steps1": {"cache": {"sink_frames": 0}, "sampling": {"denoising_steps": [1000]}},
}
TUNING_SEED = 2  # neither training's episodes (0) nor the evaluation's (ev.EVAL_SEED)


def with_variant(config: dict, name: str) -> dict:
    """The bundle config with one variant's `cache` / `sampling` entries replaced."""
    if name not in VARIANTS:
        raise SystemExit(f"error: unknown variant '{name}'; expected one of {', '.join(VARIANTS)}")
    out = copy.deepcopy(config)
    for section, entries in VARIANTS[name].items():
        out[section].update(entries)
    return out


def last_minute_motion(frames: np.ndarray, fps: int) -> dict:
    """Mean |frame − previous frame| and mean value over the last minute (uint8 scale)."""
    tail = frames[-60 * fps :].astype(np.float32)
    return {"motion": float(np.abs(np.diff(tail, axis=0)).mean()), "mean": float(tail.mean())}


def run_variant(bundle: BundledWorldModel, args: argparse.Namespace) -> dict:
    with torch.inference_mode():
        fid = ev.fidelity(bundle, args.episodes, seed=args.seed)
        steer = ev.steering(bundle, args.steer_cases, seed=args.seed)
        long = ev.long_rollouts(bundle, args.minutes, list(args.scenes), seed=args.seed)
    row: dict = {"psnr": fid["psnr_mean"], "ssim": fid["ssim_mean"], "steer": f"{steer['agree']}/{steer['total']}"}
    for scene, r in long["scenes"].items():
        gen, truth = r.pop("_frames")
        fps = bundle.config["fps"]
        row[scene] = {
            "palette": r["palette"]["agreement"],
            "vde_ratio": {k: v["ratio"] for k, v in r["vde"].items()},
            "model_last_minute": last_minute_motion(gen, fps),
            "truth_last_minute": last_minute_motion(truth, fps),
        }
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", help="folder with the bundle's files (default: the shipped one)")
    p.add_argument("--variants", default="nosink,sink3,win15,ctx25", help=f"comma list of {', '.join(VARIANTS)}")
    p.add_argument("--seed", type=int, default=TUNING_SEED)
    p.add_argument("--episodes", type=int, default=8, help="fidelity episodes")
    p.add_argument("--steer-cases", type=int, default=16)
    p.add_argument("--minutes", type=float, default=5.0, help="length of each long rollout")
    p.add_argument("--scenes", nargs="+", default=["sunset", "night"])
    p.add_argument(
        "--on-evaluation-seed",
        action="store_true",
        help="allow --seed EVAL_SEED: to confirm a choice already made (the motion check in docs), never to make one",
    )
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.seed == 0 or (args.seed == ev.EVAL_SEED and not args.on_evaluation_seed):
        raise SystemExit(f"error: --seed {args.seed} is a training or evaluation seed; tune on another (default 2)")
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    for name in names:
        with_variant({"cache": {}, "sampling": {}}, name)  # every name checked before the first long run
    bundle = load_bundled(args.bundle)
    shipped = copy.deepcopy(bundle.config)
    results: dict = {"seed": args.seed, "minutes": args.minutes, "variants": {}}
    for name in names:
        bundle.config = with_variant(shipped, name)
        t0 = time.perf_counter()
        row = run_variant(bundle, args)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        results["variants"][name] = row
        print(name, json.dumps(row), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    bundle.config = shipped


if __name__ == "__main__":
    main()
