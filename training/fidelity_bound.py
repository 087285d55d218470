"""How well could any model do on issue #23's fidelity bar? The world's own uncertainty after the true prefix.

    python -m training.fidelity_bound --json OUT.json                          # v2: the 8 fidelity episodes
    python -m training.fidelity_bound --world v1 --v1-road /tmp/v1/inferix_core/world/road.py \\
        --v1-bundle /tmp/v1/inferix_core/assets/bundled --json OUT_v1.json     # v1 (from `git archive 084f673`)

Why it exists: `evaluate.fidelity` scores the model's first 2 s after a 1-block true prefix against THE truth,
one future of the episode's seed. Part of that future was decided by the seed but not shown by the prefix (the
curve and the objects past the draw distance, cars not yet in view, the road behind a crest), and no predictor
can know it. The bar (27.2 dB / 0.905) was v1's model in v1's world; v2's world adds traffic and hills. This
measures, on the same episodes, actions, scenes and frames as `evaluate.fidelity`, how much that matters.

Per episode, K alternative truths: the same seed, actions and scene, with the seed's randomness that the prefix
does not show drawn again (`road.Redraw`). Modes (`--modes`):

* `exact` (default): everything whose re-draw leaves the 9 prefix frames bit for bit: the nearest cut of the
  track beyond which re-drawn curves and objects leave the prefix identical (a bisection on track distance),
  then each roadside object pair and each car in range whose re-draws (`--tries` of them) all leave it
  identical; each alternative is checked (a re-draw that changes the prefix is rejected and counted).
* `certain`: only what no prefix state had within the draw distance (`road.hidden_future`): bit-identical by
  construction, and re-draws less than `exact` (fog, crests and sub-pixel sprites count as seen).
* `viewZ` (e.g. view10): as if nothing farther than Z track units at every prefix state could be made out:
  the curves, objects and cars beyond are re-drawn although the prefix shows them faintly, so the prefixes
  differ (reported). A pessimistic proxy for a model that sees the prefix through its autoencoder.
* `none`: the control, the alternatives are the truth itself (must score as identical).

Both exact notions are optimistic (the hills' and the mountains' hidden parts are never re-drawn, and the model
sees the prefix through the autoencoder, not its bits). Reported, per frame of the 2 s like `evaluate.fidelity`
(mean of per-frame dB, per half-second, per episode, and the PSNR of the mean MSE):
`alternate`: one alternative against the truth (what a perfect sampler of the world would score);
`mean`: the pixel mean of the K alternatives against the truth (the MMSE predictor, estimated; `mmse`
corrects its PSNR for finite K: E|mean_K − truth|² = (1 + 1/K)·E|E[x] − truth|² when the truth is one more
draw); and the same passed through the bundle's autoencoder (`ae_*`: encode/decode of the truth, of an
alternative, of the pixel mean, and the decoded mean latent), so the ceiling includes the autoencoder.

`--diagnostics` scores predictors that are right but for one thing (the last prefix frame held; the truth
without roadside objects or traffic; the car D units ahead or P % faster after the prefix) and, with
`--model`, the bundle's own rollouts: where a model's error can come from, on the same frames.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.world import road
from training.world.compare import psnr, ssim

from .data import episode_actions, episode_seed
from .evaluate import EVAL_SEED, FIDELITY_BASE, fidelity_frames

PREFIX_FRAMES = 9  # one latent block of 3 frames: pixel frames 0..8
# Bands of rows (fractions of the height) for where a model's error is: sky, horizon and mountains, far, middle
# and near road, and the car's rows with the road under it (at 96²: rows 0-30-45-58-72-83-96).
ROW_BANDS = ((0.0, 0.3125), (0.3125, 0.47), (0.47, 0.6), (0.6, 0.75), (0.75, 0.865), (0.865, 1.0))


@dataclass
class Episode:
    index: int
    seed: int
    scene: str | None
    latent_actions: np.ndarray
    actions: np.ndarray  # pixel actions
    truth: np.ndarray  # uint8 [T, H, W, 3]


def _without(cls: type, drop: frozenset[str]) -> type:
    """`cls` (a RoadWorld) that does not draw the roadside objects and/or the other cars named in `drop`.

    A diagnostic, not a world: the car drives exactly as in the episode (the cars still slow it down), so
    its frames are what a predictor scores that gets everything right except what it leaves out.
    """
    noop = staticmethod(lambda *args: None)
    body = {"_draw_sprite": noop} if "objects" in drop else {}
    if "traffic" in drop:
        body["_draw_other_car"] = noop
    return type(f"{cls.__name__}Without", (cls,), body)


def _box_v2(big: np.ndarray, s: int) -> np.ndarray:
    return sum(big[i::s, j::s] for i in range(s) for j in range(s)) / (s * s)  # as road.render_episode


def _box_v1(big: np.ndarray, s: int) -> np.ndarray:
    h, w = big.shape[0] // s, big.shape[1] // s
    return big.reshape(h, s, w, s, 3).mean(axis=(1, 3))  # as v1's render_episode


def _render_world(world, actions: np.ndarray, box: Callable, s: int = 2, edit: Callable | None = None) -> np.ndarray:
    """render_episode's loop on a world made by the caller: frame 0, then a step and a frame per action.

    `edit(t, state)`, if given, may change the car's state before frame t is rendered (a diagnostic).
    """
    frames = []
    for t in range(len(actions)):
        if t:
            world.step(int(actions[t]))
        if edit is not None:
            edit(t, world.state)
        frames.append((box(world.render().astype(np.float32), s) + 0.5).astype(np.uint8))
    return np.stack(frames)


# --------------------------------------------------------------------------- the worlds


class V2World:
    """road.py at 96², the scenes in turn, the episodes of `evaluate.fidelity`."""

    name = "v2"
    box = staticmethod(_box_v2)

    def __init__(self, size: int = 96, spec: road.WorldSpec | None = None):
        self.size = size
        self.spec = spec or road.WorldSpec()  # a bundle's own: `evaluate.world_spec_of(bundle.config)`

    def episode(self, i: int, num_latent: int) -> Episode:
        idx, scene = FIDELITY_BASE + i, road.SCENES[i % len(road.SCENES)]
        lat = episode_actions(EVAL_SEED, idx, num_latent)
        pa = road.latent_to_pixel_actions(lat)
        seed = episode_seed(EVAL_SEED, idx)
        return Episode(idx, seed, scene, lat, pa, self.render(seed, pa, scene))

    def render_without(self, ep: Episode, drop: frozenset[str], edit: Callable | None = None) -> np.ndarray:
        world = _without(road.RoadWorld, drop)(ep.seed, 2 * self.size, 2 * self.size, spec=self.spec, scene=ep.scene)
        return _render_world(world, ep.actions, self.box, edit=edit)

    def render(self, seed: int, actions: np.ndarray, scene: str | None, redraw: road.Redraw | None = None):
        return road.render_episode(seed, actions, self.size, self.size, scene=scene, redraw=redraw, spec=self.spec)

    def states(self, seed: int, actions: np.ndarray) -> tuple[tuple[float, float], ...]:
        return road.hidden_future(seed, actions, PREFIX_FRAMES - 1, 0, spec=self.spec).states

    def cars(self, seed: int, states) -> np.ndarray:
        tr = road.RoadWorld(seed, 8, 8, spec=self.spec).traffic
        return np.flatnonzero(road.cars_in_view(states, tr.start, tr.speed, self.spec.draw_distance))


class V1World:
    """v1's road.py (commit 084f673, loaded from a file) at 64², its episodes (v1's random policy, episode i).

    v1 has no traffic and no hills. Its objects get v2's re-draw hook (the one line that seeds object pair i
    calls `_object_rng`, as in v2) and its track is v2's `Track` of the same seed, whose curves are the same
    draws (checked bit for bit), so `road.RoadWorld._redraw` applies to it unchanged.
    """

    name = "v1"
    box = staticmethod(_box_v1)

    def __init__(self, path: str | Path, size: int = 64):
        src = Path(path).read_text()
        line = "r = np.random.default_rng((self._object_seed, i))"
        if src.count(line) != 1:
            raise SystemExit(f"error: {path} is not v1's road.py (no single `{line}`)")
        mod_spec = importlib.util.spec_from_loader("road_v1", loader=None)
        self.mod = sys.modules["road_v1"] = importlib.util.module_from_spec(mod_spec)  # dataclasses look it up
        exec(compile(src.replace(line, "r = self._object_rng(i)"), str(path), "exec"), self.mod.__dict__)
        self.mod.RoadWorld._object_rng = road.RoadWorld._object_rng
        self.mod.RoadWorld._object_redraw = None  # nothing re-drawn unless a Redraw says so
        self.spec = self.mod.WorldSpec()
        self.size = size

    def episode(self, i: int, num_latent: int) -> Episode:
        lat = self.mod.random_actions(np.random.default_rng((EVAL_SEED, i, 12345)), num_latent)
        pa = self.mod.latent_to_pixel_actions(lat)
        seed = episode_seed(EVAL_SEED, i)
        truth = self.render(seed, pa, None)
        if i == 0 and not np.array_equal(truth, self.mod.render_episode(seed, pa, self.size, self.size)):
            raise AssertionError("the v1 render loop here differs from v1's render_episode")
        return Episode(i, seed, None, lat, pa, truth)

    def render_without(self, ep: Episode, drop: frozenset[str], edit: Callable | None = None) -> np.ndarray:
        world = _without(self.mod.RoadWorld, drop)(ep.seed, 2 * self.size, 2 * self.size)
        return _render_world(world, ep.actions, self.box, edit=edit)

    def _world(self, seed: int, redraw: road.Redraw | None):
        s = 2
        world = self.mod.RoadWorld(seed, self.size * s, self.size * s)
        if redraw is not None:
            track = road.Track(seed)
            if not np.array_equal(track.curvature, world.track.curvature):
                raise AssertionError("v2's Track no longer draws v1's curves")
            world.track = track
            world.traffic = road.Traffic(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((0, 3), np.float32))
            world._traffic_prior = (0.0, 1.0)
            road.RoadWorld._redraw(world, redraw)
        return world

    def render(self, seed: int, actions: np.ndarray, scene: str | None, redraw: road.Redraw | None = None):
        return _render_world(self._world(seed, redraw), actions, self.box)  # v1's render_episode loop

    def states(self, seed: int, actions: np.ndarray) -> tuple[tuple[float, float], ...]:
        world, out = self.mod.RoadWorld(seed, 8, 8), []
        for t in range(PREFIX_FRAMES):
            if t:
                world.step(int(actions[t]))
            out.append((world.state.position, 0.0))
        return tuple(out)

    def cars(self, seed: int, states) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------------------- what the prefix hides


def hidden_parts(world, ep: Episode, states, tries: int) -> dict:
    """The nearest track cut, roadside object pairs and cars whose re-draws all leave the prefix bit-identical."""
    sp = world.spec
    prefix = ep.truth[:PREFIX_FRAMES]
    renders = [0]

    def identical(**kw) -> bool:
        for m in range(tries):
            r = road.Redraw(1_000_000 + m, states, **kw)
            renders[0] += 1
            if not np.array_equal(world.render(ep.seed, ep.actions[:PREFIX_FRAMES], ep.scene, r), prefix):
                return False
        return True

    pos = [p for p, _ in states]
    far = max(pos)
    lo, hi = 0, int(np.ceil(sp.draw_distance + 1.0))  # cut at far + hi: certainly hidden
    if identical(beyond=far):
        hi = 0
    while hi - lo > 1:  # bisection, in whole track units, for the nearest cut that keeps the prefix
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if identical(beyond=far + mid) else (mid, hi)
    beyond = far + hi
    first = int(np.ceil((min(pos) + 0.8) / sp.object_spacing))
    objects = [i for i in range(first, int(beyond / sp.object_spacing) + 1) if identical(beyond=beyond, objects=(i,))]
    in_view = world.cars(ep.seed, states)
    cars = [int(j) for j in in_view if identical(beyond=beyond, objects=tuple(objects), cars=(int(j),))]
    return {
        "beyond": beyond,
        "cut_ahead_of_car": beyond - far,  # track units ahead of the car's last prefix position
        "objects": objects,
        "objects_in_range": int(beyond / sp.object_spacing) + 1 - first,
        "cars": cars,
        "cars_in_range": [int(j) for j in in_view],
        "check_renders": renders[0],
    }


def alternates(world, ep: Episode, mode: str, k: int, tries: int, max_rejects: int) -> tuple[np.ndarray, dict]:
    """K alternative truths [K, T, H, W, 3] whose prefix is the episode's bit for bit, and what was re-drawn."""
    states = world.states(ep.seed, ep.actions)
    info: dict = {"mode": mode}
    kw: dict = {}
    check = True  # the prefix must come out bit for bit
    if mode.startswith("view"):
        kw, check = {"view": float(mode[4:])}, False
    elif mode == "exact":
        info.update(hidden_parts(world, ep, states, tries))
        kw = {"beyond": info["beyond"], "objects": tuple(info["objects"]), "cars": tuple(info["cars"])}
    elif mode == "none":  # the control: no re-draw at all, the alternatives are the truth itself
        return np.stack([ep.truth] * k), {**info, "rejected": 0}
    out, rejected, seed = [], 0, 0
    while len(out) < k:
        frames = world.render(ep.seed, ep.actions, ep.scene, road.Redraw(seed, states, **kw))
        seed += 1
        if not check or np.array_equal(frames[:PREFIX_FRAMES], ep.truth[:PREFIX_FRAMES]):
            out.append(frames)
        else:
            rejected += 1
            if rejected > max_rejects:
                raise RuntimeError(f"episode {ep.index}: {rejected} re-draws changed the prefix ({info})")
    info["rejected"] = rejected
    info["differs_from_truth"] = int(sum(not np.array_equal(f, ep.truth) for f in out))
    pre = [f[:PREFIX_FRAMES] for f in out]
    info["prefix_identical"] = int(sum(np.array_equal(f, ep.truth[:PREFIX_FRAMES]) for f in pre))
    mse = np.mean([(f.astype(np.float64) - ep.truth[:PREFIX_FRAMES]) ** 2 for f in pre])
    info["prefix_psnr_of_mean_mse"] = float(10 * np.log10(255.0**2 / max(mse, 1e-10)))
    return np.stack(out), info


# --------------------------------------------------------------------------- scores


def _autoencoder(vae) -> tuple[Callable, Callable]:
    """(encode, decode) of a bundle's autoencoder on uint8 frames [T, H, W, 3]."""
    import torch

    from .evaluate import to_uint8

    def video(frames: np.ndarray):
        return torch.from_numpy(frames).permute(3, 0, 1, 2).unsqueeze(0).float() / 127.5 - 1

    def encode(frames: np.ndarray):
        with torch.inference_mode():
            return vae.encode(video(frames))

    def decode(z) -> np.ndarray:
        with torch.inference_mode():
            return to_uint8(vae.decode(z))

    return encode, decode


def to_uint8_mean(frames: np.ndarray) -> np.ndarray:
    """The pixel mean of [K, T, H, W, 3] uint8 frames, rounded to uint8 (what a video predictor outputs)."""
    return (frames.astype(np.float64).mean(0) + 0.5).astype(np.uint8)


def score_episode(ep: Episode, alts: np.ndarray, sl: slice, ae: tuple[Callable, Callable] | None) -> dict:
    """Per-frame PSNR/SSIM [frames] of each predictor against the truth over `sl`."""
    truth = ep.truth[sl]
    mean = to_uint8_mean(alts)
    k = len(alts)
    out = {
        "alternate_psnr": np.mean([psnr(a[sl], truth) for a in alts], 0),
        "alternate_ssim": np.mean([ssim(a[sl], truth) for a in alts], 0),
        "mean_psnr": psnr(mean[sl], truth),
        "mean_ssim": ssim(mean[sl], truth),
    }
    # MSE of the K-mean is (1 + 1/K) times that of the true conditional mean (truth and alternatives exchangeable)
    out["mmse_psnr"] = out["mean_psnr"] + 10 * np.log10((k + 1) / k)
    if ae is not None:
        encode, decode = ae
        out["ae_truth_psnr"] = psnr(decode(encode(ep.truth))[sl], truth)
        out["ae_truth_ssim"] = ssim(decode(encode(ep.truth))[sl], truth)
        zs = [encode(a) for a in alts]
        dec = [decode(z)[sl] for z in zs]
        out["ae_alternate_psnr"] = np.mean([psnr(d, truth) for d in dec], 0)
        out["ae_alternate_ssim"] = np.mean([ssim(d, truth) for d in dec], 0)
        ae_mean = decode(encode(mean))[sl]
        out["ae_mean_psnr"], out["ae_mean_ssim"] = psnr(ae_mean, truth), ssim(ae_mean, truth)
        lat_mean = decode(sum(zs) / k)[sl]
        out["ae_latent_mean_psnr"], out["ae_latent_mean_ssim"] = psnr(lat_mean, truth), ssim(lat_mean, truth)
    return out


def summarise(per_episode: list[dict], fps: int) -> dict:
    """Means over episodes and frames (as evaluate.fidelity), per half-second, and PSNR of the mean MSE."""
    half = max(1, fps // 2)
    out = {}
    for key in per_episode[0]:
        v = np.stack([e[key] for e in per_episode])  # (E, frames)
        r = {
            "mean": float(v.mean()),
            "per_half_second": [float(v[:, a : a + half].mean()) for a in range(0, v.shape[1], half)],
        }
        r["per_episode"] = [float(x) for x in v.mean(1)]
        if key.endswith("_psnr"):
            mse = 255.0**2 / 10 ** (v / 10)
            r["of_mean_mse"] = float(10 * np.log10(255.0**2 / mse.mean()))  # not dominated by exact frames
        out[key] = r
    return out


def measure(world, episodes: int, k: int, mode: str, seconds: float, ae, tries: int, log=print) -> dict:
    fps = road.FPS
    num_latent, sl = fidelity_frames(seconds, fps)  # as evaluate.fidelity
    scores, infos = [], []
    for i in range(episodes):
        t0 = time.perf_counter()
        ep = world.episode(i, num_latent)
        alts, info = alternates(world, ep, mode, k, tries, max_rejects=20 * k)
        scores.append(score_episode(ep, alts, sl, ae))
        info.update(episode=ep.index, scene=ep.scene, seconds=round(time.perf_counter() - t0, 1))
        infos.append(info)
        log(
            f"{world.name} {mode} episode {ep.index} ({ep.scene}): alternate {scores[-1]['alternate_psnr'].mean():.2f}"
            f" dB, mean-of-{k} {scores[-1]['mean_psnr'].mean():.2f} dB; "
            + json.dumps({x: y for x, y in info.items() if x not in ("objects", "cars_in_range")})
        )
    return {
        "world": world.name,
        "mode": mode,
        "alternates": k,
        "episodes": episodes,
        "seconds": seconds,
        "frames": [sl.start, sl.stop],
        "scores": summarise(scores, fps),
        "episodes_info": infos,
    }


def _ahead(d: float) -> Callable:
    def edit(t: int, state) -> None:
        if t == PREFIX_FRAMES - 1:
            state.position += d

    return edit


def _faster(share: float) -> Callable:
    def edit(t: int, state) -> None:
        if t >= PREFIX_FRAMES:
            state.position += share * state.speed / road.FPS

    return edit


OFFSET_STEP = 0.125  # track units between the offsets `track_offsets` tries


def offsets_for(spec) -> np.ndarray:
    """The car offsets `track_offsets` searches: one stripe period (2 · stripe_len track units) centred on 0, so an
    offset is only defined modulo that period; v2's car drives ~14 units/s, a 10 % speed error is 2.8 units after 2 s."""
    return np.arange(-spec.stripe_len, spec.stripe_len + 1e-9, OFFSET_STEP)


def track_offsets(world, ep: Episode, frames: np.ndarray, sl: slice, offsets: np.ndarray | None = None) -> np.ndarray:
    """Per frame of `frames` (the scored slice `sl`), the offset d of the car along the track, from the last prefix
    frame on, whose truth render (`_ahead(d)`) is closest to it in mean squared error (`offsets`: default
    `offsets_for(world.spec)`).

    Read on a model's frames, it is how far ahead (> 0) or behind the model's car has driven at each frame:
    whether the stripes' phase error is an early offset, a steady speed error (a ramp) or a random walk.
    """
    offsets = offsets_for(world.spec) if offsets is None else offsets
    frames = frames.astype(np.float64)
    err = np.stack(
        [
            ((world.render_without(ep, frozenset(), edit=_ahead(float(d)))[sl] - frames) ** 2).mean(axis=(1, 2, 3))
            for d in offsets
        ]
    )  # (D, T)
    return offsets[err.argmin(0)]


def _offset_summary(off: np.ndarray, fps: int, searched: np.ndarray) -> dict:
    """(E, T) track offsets (+ = ahead of the truth) by half-second: signed mean, mean of |.|, and the raw rows."""
    half = max(1, fps // 2)
    starts = range(0, off.shape[1], half)
    return {
        "per_half_second_mean": [float(off[:, a : a + half].mean()) for a in starts],
        "per_half_second_mean_abs": [float(np.abs(off[:, a : a + half]).mean()) for a in starts],
        "last_frame_per_episode": [float(x) for x in off[:, -1]],
        "per_episode_per_frame": off.tolist(),
        "searched": [float(searched[0]), float(searched[-1]), float(searched[1] - searched[0])],
    }


def diagnostics(world, episodes: int, seconds: float, bundle=None, log=print, phase: bool = False) -> dict:
    """Predictors that are right except for one thing, on the same frames: where a model's error can come from.

    hold: the last prefix frame, held; no_objects / no_traffic / no_scenery: the truth without the roadside
    objects, the other cars, or both (the car drives as in the episode); ahead_D: the truth with the car D
    track units further along from the last prefix frame on (the stripes' phase off, nothing else);
    speed_P: the truth with the car P % faster after the prefix; model: the bundle's own rollout
    (`evaluate.rollout`, noise seed = episode number as in evaluate.fidelity), when a bundle is given. With
    `phase` (and a bundle), also the model car's offset along the track per frame (`track_offsets`).
    """
    fps = road.FPS
    num_latent, sl = fidelity_frames(seconds, fps)  # as evaluate.fidelity
    drops = {"no_objects": {"objects"}}
    if world.name == "v2":
        drops.update(no_traffic={"traffic"}, no_scenery={"objects", "traffic"})
    scores, row_error, speeds, offsets, ae_offsets = [], [], [], [], []
    if phase and bundle is not None:
        encode, decode = _autoencoder(bundle.vae)
    for i in range(episodes):
        ep = world.episode(i, num_latent)
        if i == 0 and not np.array_equal(world.render_without(ep, frozenset()), ep.truth):
            raise AssertionError("the diagnostics' render loop differs from the world's render_episode")
        truth = ep.truth[sl]
        car = []
        world.render_without(ep, frozenset(), edit=lambda t, state, car=car: car.append(state.speed))
        speeds.append(float(np.mean(car[sl])))
        preds = {"hold": np.repeat(ep.truth[PREFIX_FRAMES - 1 : PREFIX_FRAMES], sl.stop - sl.start, 0)}
        preds.update({k: world.render_without(ep, frozenset(d))[sl] for k, d in drops.items()})
        for d in (0.25, 0.5, 1.0, 2.0):
            preds[f"ahead_{d}"] = world.render_without(ep, frozenset(), edit=_ahead(d))[sl]
        for pct in (2, 5, 10):
            preds[f"speed_{pct}"] = world.render_without(ep, frozenset(), edit=_faster(pct / 100))[sl]
        if bundle is not None:
            import torch

            from .evaluate import rollout

            with torch.inference_mode():
                gen, _ = rollout(bundle, ep.seed, ep.latent_actions, noise_seed=i, scene=ep.scene, world=world)
            preds["model"] = gen[sl]
            if phase:  # the model's car, and the truth's through the autoencoder (the phase it can keep)
                offsets.append(track_offsets(world, ep, gen[sl], sl))
                ae_offsets.append(track_offsets(world, ep, decode(encode(ep.truth))[sl], sl))
            sq = ((gen[sl].astype(np.float64) - truth) ** 2).mean(axis=(0, 2, 3))  # per row
            row_error.append(sq)
        scores.append({f"{k}_{m}": f(v, truth) for k, v in preds.items() for m, f in (("psnr", psnr), ("ssim", ssim))})
        log(
            f"{world.name} diagnostics episode {ep.index}: "
            + json.dumps({k: round(float(v.mean()), 2) for k, v in scores[-1].items()})
        )
    out = {"world": world.name, "episodes": episodes, "seconds": seconds, "scores": summarise(scores, fps)}
    out["car_speed"] = {"mean": float(np.mean(speeds)), "per_episode": speeds}  # units/s over the scored frames
    for key, rows in (("model_track_offset", offsets), ("autoencoder_track_offset", ae_offsets)):
        if rows:
            out[key] = _offset_summary(np.stack(rows), fps, offsets_for(world.spec))
    if row_error:  # where in the frame the model's squared error is, by bands of rows (fractions of the height)
        sq = np.mean(row_error, 0)
        h = len(sq)
        out["model_error_share_by_rows"] = {
            f"{a:.2f}-{b:.2f}": float(sq[round(a * h) : round(b * h)].sum() / sq.sum()) for a, b in ROW_BANDS
        }
    return out


def _mode(text: str) -> str:
    if text in ("exact", "certain", "none"):
        return text
    if text.startswith("view"):
        try:
            if float(text[4:]) > 0:
                return text
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"{text!r}: use exact, certain, none or viewZ (Z > 0 track units)")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", choices=("v2", "v1"), default="v2")
    p.add_argument("--v1-road", default=None, help="v1's road.py (git show 084f673:inferix_core/world/road.py)")
    p.add_argument("--v1-bundle", default=None, help="v1's bundle folder, for its autoencoder (from 084f673)")
    p.add_argument("--bundle", default=None, help="v2 bundle whose autoencoder is used (default: the shipped one)")
    p.add_argument(
        "--modes",
        nargs="*",
        type=_mode,
        default=["exact", "certain"],
        help="exact, certain, none (the control: the truth itself) or viewZ (everything farther than Z units at"
        " every prefix state re-drawn, e.g. view30: a proxy for what the model cannot make out; not bit-identical)",
    )
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--alternates", type=int, default=16, help="K alternative truths per episode")
    p.add_argument("--tries", type=int, default=3, help="re-draws that must all keep the prefix, per hidden part")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="frame size (default 96 for v2, 64 for v1: the bundles' sizes, which the autoencoder needs)",
    )
    p.add_argument("--no-ae", action="store_true", help="skip the autoencoder scores")
    p.add_argument(
        "--diagnostics", action="store_true", help="also score hold / no_objects / no_traffic / no_scenery predictors"
    )
    p.add_argument("--model", action="store_true", help="with --diagnostics: also the bundle's own rollouts")
    p.add_argument(
        "--phase", action="store_true", help="with --model: the model car's offset along the track per frame"
    )
    p.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.world == "v1":
        if args.v1_road is None:
            raise SystemExit("error: --world v1 needs --v1-road (git archive 084f673 | tar -x -C /tmp/v1)")
        world = V1World(args.v1_road, args.size or 64)
        bundle_dir = args.v1_bundle
        if bundle_dir is None and (not args.no_ae or args.model):
            raise SystemExit("error: --world v1 needs --v1-bundle for its autoencoder and model, or --no-ae")
    else:
        world, bundle_dir = V2World(args.size or 96), args.bundle
    bundle = None
    if not args.no_ae or args.model:
        import torch

        from inferix_core.models.bundled import load_bundled

        torch.set_num_threads(args.threads)
        bundle = load_bundled(bundle_dir, device="cpu")
        if world.name == "v2":  # the constants the bundle was trained with
            from .evaluate import world_spec_of

            world = V2World(args.size or 96, world_spec_of(bundle.config))
    ae = None if args.no_ae else _autoencoder(bundle.vae)
    results = {"command": "python -m training.fidelity_bound " + " ".join(sys.argv[1:] if argv is None else argv)}
    for mode in args.modes:
        results[mode] = measure(world, args.episodes, args.alternates, mode, args.seconds, ae, args.tries)
        s = results[mode]["scores"]
        print(
            json.dumps(
                {key: [round(v["mean"], 3), [round(x, 2) for x in v["per_half_second"]]] for key, v in s.items()}
            )
        )
    if args.diagnostics:
        results["diagnostics"] = diagnostics(
            world, args.episodes, args.seconds, bundle if args.model else None, phase=args.phase
        )
        for key in ("model_track_offset", "autoencoder_track_offset"):
            if key in results["diagnostics"]:
                t = results["diagnostics"][key]
                print(f"{key} by half-second, mean / mean |.|:", [round(x, 2) for x in t["per_half_second_mean"]],
                      [round(x, 2) for x in t["per_half_second_mean_abs"]])  # fmt: skip
        s = results["diagnostics"]["scores"]
        print(
            json.dumps(
                {key: [round(v["mean"], 3), [round(x, 2) for x in v["per_half_second"]]] for key, v in s.items()}
            )
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
