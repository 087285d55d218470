"""Does the bundled model's car speed up and slow down as much as the renderer's? (issue #23's fidelity bar)

    python -m training.action_gain --json OUT.json

Why: `fidelity_bound --phase` shows the model's car losing the stripes' phase after its first generated block,
mostly falling behind, worst where the episode accelerates or brakes hard. This holds one action after the true
block of each fidelity episode (none, accelerate, brake), renders the truth under it, rolls the model out under
it (`evaluate.rollout`, the bundle's inference settings), and reads the model car's offset from the truth per
frame (`fidelity_bound.track_offsets`). From the offsets and the truth's own positions:

    gain(a) = (model's extra distance under a, against under none) / (the truth's extra distance, the same)
            = 1 + (offset_a − offset_none) / (position_a − position_none)     at the last scored frame

1 is a car that responds as the renderer's; below 1, one that under-reacts (a mean-reverting speed). An offset
is known only modulo one stripe period (`offsets_for`: 8 units in the first v2 world), so the gain is read where the truth's extra
distance is large against the offsets and the offsets stay inside ±4 (flagged per episode otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from training.world import road

from .fidelity_bound import PREFIX_FRAMES, Episode, V2World, offsets_for, track_offsets

HELD = {"none": road.NONE, "accelerate": road.ACCEL, "brake": road.BRAKE}


def held_episode(world: V2World, ep: Episode, action: int) -> Episode:
    """The episode with its true block's actions kept and `action` held over every later latent frame."""
    lat = ep.latent_actions.copy()
    lat[3:] = action
    pa = road.latent_to_pixel_actions(lat)
    return Episode(ep.index, ep.seed, ep.scene, lat, pa, world.render(ep.seed, pa, ep.scene))


def positions(world: V2World, ep: Episode) -> np.ndarray:
    """The renderer's car position (track units) at every pixel frame of `ep`."""
    out: list[float] = []
    world.render_without(ep, frozenset(), edit=lambda t, state: out.append(state.position))
    return np.asarray(out)


def measure(bundle, episodes: int = 8, seconds: float = 2.0, log=print) -> dict:
    """Per held action: the model's offsets from the truth per frame, the truth's extra distance, the gain."""
    import torch

    from .evaluate import fidelity_frames, rollout, world_spec_of

    world = V2World(bundle.config.get("height", 96), world_spec_of(bundle.config))
    num_latent, sl = fidelity_frames(seconds, road.FPS)
    last = sl.stop - 1
    rows = []
    for i in range(episodes):
        base = world.episode(i, num_latent)
        row: dict = {"episode": base.index}
        for name, action in HELD.items():
            ep = held_episode(world, base, action)
            with torch.inference_mode():
                gen, _ = rollout(bundle, ep.seed, ep.latent_actions, noise_seed=i, scene=ep.scene, world=world)
            off = track_offsets(world, ep, gen[sl], sl)
            pos = positions(world, ep)
            row[name] = {"offset": off.tolist(), "travelled": float(pos[last] - pos[PREFIX_FRAMES - 1])}
        for name in ("accelerate", "brake"):
            extra = row[name]["travelled"] - row["none"]["travelled"]
            d_off = row[name]["offset"][-1] - row["none"]["offset"][-1]
            edge = max(abs(row[name]["offset"][-1]), abs(row["none"]["offset"][-1])) >= offsets_for(world.spec)[-1]
            row[f"{name}_gain"] = {"truth_extra": extra, "model_extra": extra + d_off, "gain": 1 + d_off / extra,
                                   "at_search_edge": bool(edge)}  # fmt: skip
        rows.append(row)
        log(
            f"episode {base.index}: "
            + json.dumps({k: {kk: round(v, 2) for kk, v in row[f"{k}_gain"].items()} for k in ("accelerate", "brake")})
        )
    out: dict = {"episodes": episodes, "seconds": seconds, "per_episode": rows}
    for name in ("accelerate", "brake"):
        gains = [r[f"{name}_gain"]["gain"] for r in rows if not r[f"{name}_gain"]["at_search_edge"]]
        out[f"{name}_gain_median"] = float(np.median(gains)) if gains else None
        out[f"{name}_gain_episodes"] = len(gains)
    out["offset_last_mean"] = {k: float(np.mean([r[k]["offset"][-1] for r in rows])) for k in HELD}
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=None, help="bundle folder (default: the shipped one)")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    from inferix_core.models.bundled import load_bundled

    torch.set_num_threads(args.threads)
    out = measure(load_bundled(args.bundle, device="cpu"), args.episodes, args.seconds)
    out["command"] = "python -m training.action_gain " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps({k: v for k, v in out.items() if k != "per_episode"}))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
