"""Check the steering estimators against the renderer's own geometry, then the model against the renderer.

    python -m training.steering_check --starts 40 --json OUT.json            # estimators on the renderer only
    python -m training.steering_check --starts 40 --model --json OUT.json    # and the shipped model (CPU, ~5 min)

Why it exists: `evaluate.steering` counts a case as a miss when the sign of the model's road shift disagrees with
the renderer's. That is only as good as the shift estimator, and the renderer knows the answer exactly: its
projection puts the road centre of each ground row at a computable column (`geometric_road_shift`). For the
held-out steering starts of `evaluate.steering` (both directions, 0.75 s of steering against 'none' from the
same start), this scores `road_centre_shift` (what `evaluate.steering` uses) and `horizontal_shift` on the
channel mean (what it used before) on the renderer's frames, on their autoencoder reconstructions (frames with
a model's kind of blur) and, with `--model`, on the model's rollouts (noise seed 7, as `evaluate.steering`),
all against the geometric shift, per scene.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from training.world import latent_to_pixel_actions, road
from training.world.compare import horizontal_shift, road_centre_shift
from training.world.road import LEFT, NONE, RIGHT

from .data import episode_actions, episode_seed
from .evaluate import EVAL_SEED, STEER_BASE, road_and_grass, rollout, to_uint8, world_of


def geometric_road_shift(
    seed: int,
    steer: np.ndarray,
    none: np.ndarray,
    rows: slice,
    size: int,
    scene: str,
    spec: road.WorldSpec | None = None,
) -> float:
    """How far the renderer's projection moves the road centre over `rows` (px at `size`) from `none` to `steer`."""

    def centre(actions: np.ndarray) -> np.ndarray:
        world = road.RoadWorld(seed, 2 * size, 2 * size, spec=spec, scene=scene)
        for a in actions[1:]:
            world.step(int(a))
        z_s, _, clip_s, offset_s, _ = world._project()
        ys = (np.arange(rows.start, rows.stop) + 0.5) * 2  # the supersampled rows
        z = np.interp(ys, clip_s[::-1], z_s[::-1])
        return (size + (np.interp(z, z_s, offset_s) - world.state.lateral) * world.spec.focal * 2 * size / z) / 2

    return float(np.mean(centre(steer) - centre(none)))


def _summary(cases: list[dict], key: str) -> dict:
    def one(rs: list[dict]) -> dict:
        wrong = [r for r in rs if np.sign(r[key]) != np.sign(r["geometric"])]
        return {
            "sign_right": len(rs) - len(wrong),
            "total": len(rs),
            "mean_abs_error_px": float(np.mean([abs(r[key] - r["geometric"]) for r in rs])) if rs else 0.0,
            "error_over_3px": sum(abs(r[key] - r["geometric"]) > 3 for r in rs),
        }

    scenes = sorted({r["scene"] for r in cases})
    return {"all": one(cases), **{s: one([r for r in cases if r["scene"] == s]) for s in scenes}}


def check(starts: int, size: int = 96, model: bool = False, ae: bool = True, bundle_dir=None, log=print) -> dict:
    import torch

    from inferix_core.models.bundled import load_bundled

    bundle = load_bundled(bundle_dir) if (model or ae) else None
    world = world_of(bundle) if bundle is not None else None
    spec = world.spec if world is not None else road.WorldSpec()
    n = 3
    rows = slice(int(0.6 * size), int(0.8 * size))
    max_shift = max(4, size // 4)

    def decode_encode(frames: np.ndarray) -> np.ndarray:
        v = torch.from_numpy(frames).permute(3, 0, 1, 2).unsqueeze(0).float() / 127.5 - 1
        return to_uint8(bundle.vae.decode(bundle.vae.encode(v)))

    cases = []
    with torch.inference_mode():
        for i in range(starts):
            idx, scene = STEER_BASE + i, road.SCENES[i % len(road.SCENES)]
            seed, colours = episode_seed(EVAL_SEED, idx), road_and_grass(scene)
            base = episode_actions(EVAL_SEED, idx, n)
            lat = {
                k: np.concatenate([base, np.full(n, a)]) for k, a in (("left", LEFT), ("right", RIGHT), ("none", NONE))
            }
            pix = {k: latent_to_pixel_actions(v) for k, v in lat.items()}
            frames = {
                "renderer": {
                    k: road.render_episode(seed, v, size, size, scene=scene, spec=spec) for k, v in pix.items()
                }
            }
            if ae:
                frames["autoencoder"] = {k: decode_encode(v) for k, v in frames["renderer"].items()}
            if model:
                frames["model"] = {
                    k: rollout(bundle, seed, v, noise_seed=7, scene=scene, world=world)[0] for k, v in lat.items()
                }
            for k in ("left", "right"):
                c = {"start": idx, "scene": scene, "steer": k}
                c["geometric"] = round(geometric_road_shift(seed, pix[k], pix["none"], rows, size, scene, spec), 2)
                for src, f in frames.items():
                    last, none = f[k][-1], f["none"][-1]
                    c[f"{src}_road_centre"] = round(road_centre_shift(last, none, rows, *colours), 2)
                    c[f"{src}_channel_mean"] = horizontal_shift(last, none, rows, max_shift)
                cases.append(c)
            log(json.dumps(cases[-2:]))
    keys = [k for k in cases[0] if k.endswith(("_road_centre", "_channel_mean"))]
    return {"starts": starts, "size": size, "cases": cases, "summary": {k: _summary(cases, k) for k in keys}}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=40, help="held-out steering starts (two cases each)")
    p.add_argument("--model", action="store_true", help="also the bundle's rollouts")
    p.add_argument("--no-ae", action="store_true", help="skip the autoencoder reconstructions")
    p.add_argument("--bundle", default=None, help="bundle folder (default: the shipped one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    res = check(args.starts, model=args.model, ae=not args.no_ae, bundle_dir=args.bundle, log=lambda _: None)
    for key, s in res["summary"].items():
        print(
            f"{key:26s} "
            + "  ".join(f"{g}: {v['sign_right']}/{v['total']} ({v['mean_abs_error_px']:.2f} px)" for g, v in s.items())
        )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
