"""The procedural driving world (v2): a pseudo-3D road seen from behind a car, rendered with numpy.

Deterministic from `(seed, actions, scene)`: the seed fixes the track (curves and hills), roadside
objects, traffic and the car's starting state; the scene fixes the palette (one per scene, never a
mixture, so a prompt can select it); the actions (one per pixel frame) steer and throttle the car.
This is the ground truth the bundled world model is trained on and measured against. No torch here.

Rendering is the classic "OutRun" projection with hills: every depth sample z ahead of the car is
projected to a screen row from its height relative to the car (the camera pitches with the road at
the car, so the horizon moves on hills), and a running minimum of those rows from near to far is the
clip line that lets a crest hide the road behind it. Each ground row then gets the depth of the nearest
sample that reaches it; the road centre at that depth is the double integral of the track curvature
ahead (the camera always faces along the road), and stripes alternate with track distance so speed is
visible as scrolling. Other cars drive in the three lanes, slower than the player, who overtakes them.

The car has a lane-keeping assist: without a steering action it eases back to the nearest lane centre
(or onto the road from the grass), so a random policy shows driving on the road, and holding a steering
action for longer than about half a second changes lanes or leaves the road.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from inferix_core.errors import ConfigError

ACTION_NAMES: tuple[str, ...] = ("none", "steer_left", "steer_right", "accelerate", "brake")
NONE, LEFT, RIGHT, ACCEL, BRAKE = range(len(ACTION_NAMES))
FPS = 16

# One palette per scene: sky top, sky bottom (haze), mountains, grass light, grass dark, road light, road
# dark. The skies differ in hue and brightness by far more than any gradient or rounding (palette.py
# classifies frames against exactly this table).
PALETTES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "day": ((40, 100, 210), (165, 205, 240), (90, 110, 150), (70, 170, 60), (55, 145, 50), (115, 115, 120), (104, 104, 110)),
    "sunset": ((235, 110, 50), (250, 195, 130), (120, 70, 90), (150, 150, 60), (128, 130, 48), (120, 105, 100), (108, 95, 92)),
    "night": ((10, 15, 50), (60, 55, 110), (30, 30, 55), (30, 80, 55), (24, 66, 45), (62, 62, 75), (55, 55, 67)),
}  # fmt: skip
SCENES: tuple[str, ...] = tuple(PALETTES)
# The prompt vocabulary: per scene its name first, then words that mean the same scene.
_SCENE_WORDS: dict[str, tuple[str, ...]] = {
    "day": ("day", "noon", "blue"),
    "sunset": ("sunset", "evening", "orange"),
    "night": ("night", "midnight", "dark"),
}
SCENE_WORDS: tuple[str, ...] = tuple(w for s in SCENES for w in _SCENE_WORDS[s])

TRAFFIC_COLOURS = ((40, 80, 200), (230, 200, 40), (235, 235, 235), (40, 150, 90), (140, 60, 170))
LANES = (-2.0 / 3.0, 0.0, 2.0 / 3.0)  # lane centres (road edge at ±1)


def check_scene(scene: str) -> str:
    """`scene` if it is one of SCENES, else a ConfigError that lists them."""
    if scene not in PALETTES:
        raise ConfigError(f"unknown scene {scene!r}: use one of {', '.join(SCENES)}")
    return scene


def scene_for_seed(seed: int) -> str:
    """The default scene of an episode: the seed modulo the scene count, so consecutive seeds balance."""
    return SCENES[int(seed) % len(SCENES)]


def scene_words(scene: str) -> tuple[str, ...]:
    """The words of SCENE_WORDS that describe `scene` (its conditioning prompt), its name first."""
    return _SCENE_WORDS[check_scene(scene)]


def scene_from_prompt(prompt: str) -> str:
    """The scene a free-text prompt names, by its words (e.g. "a drive at sunset" → "sunset").

    Exactly one scene must be named; otherwise a ConfigError lists the vocabulary.
    """
    words = {w.strip(".,;:!?\"'()").lower() for w in prompt.split()}
    found = [s for s in SCENES if words & set(_SCENE_WORDS[s])]
    if len(found) != 1:
        what = "names no scene" if not found else f"names several scenes ({', '.join(found)})"
        # the prompt is not quoted: it may be a caption read from a file (docs/security.md)
        raise ConfigError(f"the prompt {what}: use one of the words {', '.join(SCENE_WORDS)}")
    return found[0]


# The constants the first v2 bundles (the shipped one among them) were trained on; their config.json has no
# "world_spec" (training.evaluate.world_spec_of).
FIRST_V2_WORLD: dict = {"stripe_len": 4.0}


@dataclass(frozen=True)
class WorldSpec:
    """Constants of the world's physics and camera (units: road half-widths, seconds)."""

    horizon: float = 0.42  # horizon row on flat ground, as a fraction of the image height
    cam_depth: float = 1.8  # z of the bottom screen row on flat ground
    focal: float = 0.45  # pixels per unit at z = 1, as a fraction of the image width (and height)
    pitch_follow: float = 0.5  # the camera pitches by this share of the road's slope under the car
    road_half_width: float = 1.0
    # Track length of one stripe (light or dark). At the cruise speed (13 units/s, 16 fps) stripes of 4 move 0.41 of
    # their period per latent frame (4 pixel frames), near the latent rate's Nyquist limit; a world of 8 was trained
    # once from scratch and not shipped (docs/world_model.md, "A from-scratch run in one command").
    stripe_len: float = 4.0
    object_spacing: float = 9.0  # track distance between roadside objects
    draw_distance: float = 60.0
    max_speed: float = 20.0  # track units per second
    cruise_speed: float = 13.0  # without throttle or brake the speed eases towards this
    cruise_rate: float = 0.5  # 1/s
    accel: float = 10.0
    brake: float = 10.0
    steer_rate: float = 1.2  # lateral units per second at full speed
    assist_rate: float = 3.0  # 1/s: lane keeping without a steering action
    centrifugal: float = 0.3
    offroad_max_speed: float = 7.0
    traffic_spacing: float = 35.0  # mean track distance between other cars at the start
    traffic_speed: tuple[float, float] = (5.0, 9.0)
    car_length: float = 2.2  # the player cannot get closer than this behind a car in its lane

    @classmethod
    def from_dict(cls, values: dict) -> WorldSpec:
        """A spec from a bundle's or a dataset's `world_spec` (any subset of the fields; the rest default)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"world_spec has unknown keys {unknown}: use only {sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})

    @property
    def cam_height(self) -> float:
        """Camera height above the road in lateral units, from the flat projection y = hy + f·h / z."""
        return self.cam_depth * (1.0 - self.horizon) / self.focal


@dataclass
class CarState:
    """The car: track distance, lateral offset (0 = road centre, ±1 = road edge), speed, steer."""

    position: float
    lateral: float
    speed: float
    steer: float = 0.0  # smoothed steering for the car sprite, in [-1, 1]
    background: float = 0.0  # accumulated horizontal scroll of the sky layer (pixels at W=128)
    time: float = 0.0  # seconds since the first frame (moves the traffic)


class Track:
    """Curvature and elevation along the track: smooth piecewise curves and a sum of hills from the seed."""

    def __init__(self, seed: int, length: float = 40000.0, resolution: float = 0.5):
        rng = np.random.default_rng(seed)
        self.resolution = resolution
        self._raw = np.zeros(int(length / resolution), dtype=np.float64)  # the curvature steps, before smoothing
        self._starts = self._draw_segments(rng, 0)
        self._smooth()
        # Hills: three sines with wavelengths 80-200 units; a quarter of the tracks are flat.
        hills = 0.0 if rng.random() < 0.25 else rng.uniform(0.4, 1.0)
        self._wavelength = rng.uniform(80.0, 200.0, size=3)
        self._slope = hills * rng.uniform(0.04, 0.08, size=3)  # peak slope of each sine
        self._phase = rng.uniform(0, 2 * np.pi, size=3)

    def _draw_segments(self, rng: np.random.Generator, i: int) -> list[int]:
        """Fill the raw curvature from index i on with random segments; returns their start indices."""
        starts, n = [], len(self._raw)
        while i < n:
            seg = int(rng.uniform(40, 140) / self.resolution)
            k = 0.0 if rng.random() < 0.35 else rng.choice([-1.0, 1.0]) * rng.uniform(0.004, 0.016)
            self._raw[i : i + seg] = k
            starts.append(i)
            i += seg
        return starts

    def _smooth(self) -> None:
        """Smooth the steps so curves ease in and out (box filter over ~20 units)."""
        w = int(20 / self.resolution)
        self.curvature = np.convolve(self._raw, np.ones(w) / w, mode="same")

    def redraw_beyond(self, s: float, rng: np.random.Generator) -> None:
        """Re-draw the curves beyond track distance `s` from `rng`; the curvature up to `s` stays bit for bit.

        The smoothed curvature at index i reads the raw steps up to i + (w − 1)//2, so the raw steps are kept
        up to there. The segment running at that point keeps its curvature and gets a new length from its
        prior given that it lasted that long (U(40, 140) units, at least as long as it has run); after it,
        new segments as in `__init__`.
        """
        w = int(20 / self.resolution)
        keep = int(s / self.resolution) + (w - 1) // 2 + 1  # raw steps [0, keep) stay
        if keep >= len(self._raw):
            return
        a = max(i for i in self._starts if i < keep)  # the segment that runs at keep − 1
        k = self._raw[a]
        seg = int(rng.uniform(max(40.0, (keep - a) * self.resolution), 140.0) / self.resolution)
        end = max(a + seg, keep)
        self._raw[keep:end] = k
        self._starts = [i for i in self._starts if i <= a] + self._draw_segments(rng, end)
        self._smooth()

    def curvature_at(self, s: np.ndarray | float) -> np.ndarray | float:
        idx = np.clip((np.asarray(s) / self.resolution).astype(np.int64), 0, len(self.curvature) - 1)
        return self.curvature[idx]

    def elevation_at(self, s: np.ndarray | float) -> np.ndarray:
        """Road height at track distance s (lateral units)."""
        k = 2 * np.pi / self._wavelength
        s = np.asarray(s, dtype=np.float64)[..., None]
        return (self._slope / k * np.sin(k * s + self._phase)).sum(-1)

    def slope_at(self, s: float) -> float:
        k = 2 * np.pi / self._wavelength
        return float((self._slope * np.cos(k * s + self._phase)).sum())


@dataclass
class Traffic:
    """Other cars: start position, constant speed, lane and colour of each (the player is faster)."""

    start: np.ndarray  # (N,) track distance at time 0
    speed: np.ndarray  # (N,) units per second
    lane: np.ndarray  # (N,) lateral offset
    colour: np.ndarray = field(repr=False)  # (N, 3)

    def positions(self, time: float) -> np.ndarray:
        return self.start + self.speed * time


@dataclass(frozen=True)
class Redraw:
    """What of an episode's seed to draw again, for an alternative future of the same start (`RoadWorld(redraw=)`).

    `states` are the car's (position, time) in the frames the alternative must reproduce (`hidden_future`
    gives them for the first frames of an action list). Re-drawn from `seed`, from their priors: the curves and
    the roadside objects beyond `beyond` (default: the farthest depth any state had within its draw distance),
    the objects named in `objects`, and the other cars named in `cars` as well as every car that was within
    the draw distance of no state (each from its prior restricted to staying out of that distance at every
    state; the cars are independent draws, so that is their distribution given what the states could show).
    With the defaults nothing re-drawn was within the draw distance of any state (nor slowed the car), so
    those frames come out bit for bit the same; a nearer `beyond` or named objects and cars (hidden behind a
    crest, say) are the caller's claim, to check against the frames. `view` (default: the draw distance) is the
    distance that counts as in view, for the default `beyond` and for the cars: a shorter one re-draws things the
    frames do show (faintly, far away), a proxy for what a viewer cannot make out. The hills (three sines over
    the whole track) and the mountain profile (one periodic profile) are never re-drawn.
    """

    seed: int
    states: tuple[tuple[float, float], ...]
    beyond: float | None = None
    objects: tuple[int, ...] = ()
    cars: tuple[int, ...] = ()
    view: float | None = None


def cars_in_view(
    states: tuple[tuple[float, float], ...], start: np.ndarray, speed: np.ndarray, view: float
) -> np.ndarray:
    """Which other cars (start, speed) were ahead within `view` (±1) in any of the (position, time) `states`,
    bool (N,): with the draw distance, what those frames could show of the traffic, and the cars that slowed
    the car."""
    visited = np.asarray(states, dtype=np.float64)  # (V, 2)
    gaps = np.asarray(start)[None] + np.asarray(speed)[None] * visited[:, 1:] - visited[:, :1]  # (V, N)
    return ((gaps > -1.0) & (gaps < view + 1.0)).any(0)


class RoadWorld:
    """One episode of the driving world: `step(action)` then `render()` gives the next frame."""

    def __init__(
        self,
        seed: int,
        height: int = 192,
        width: int = 192,
        spec: WorldSpec | None = None,
        scene: str | None = None,
        redraw: Redraw | None = None,
    ):
        self.spec = spec or WorldSpec()
        self.height, self.width = height, width
        self.scene = check_scene(scene) if scene is not None else scene_for_seed(seed)
        self.palette = np.array(PALETTES[self.scene], dtype=np.float32)
        rng = np.random.default_rng(seed + 7919)
        self.track = Track(seed)
        sp = self.spec
        self.state = CarState(
            position=float(rng.uniform(0, 2000)),
            lateral=float(rng.choice(LANES)),
            speed=float(rng.uniform(0.4, 0.7) * sp.max_speed),
        )
        self._object_seed = int(rng.integers(1 << 30))
        # Mountain profile: a periodic sum of sines over 4 screen widths.
        k = np.arange(1, 7)
        self._mnt_amp = rng.uniform(0.3, 1.0, size=6) / k
        self._mnt_phase = rng.uniform(0, 2 * np.pi, size=6)
        self._mnt_k = k
        # Traffic over the stretch a 5.5-minute drive at full speed can reach (8 minutes at cruise speed);
        # longer episodes drive on an empty road after that. A few cars start behind the car too.
        span = sp.max_speed * 330.0
        n = int(span / sp.traffic_spacing)
        start = self.state.position - 100.0 + np.sort(rng.uniform(0, span, size=n))
        self.traffic = Traffic(
            start=start,
            speed=rng.uniform(*sp.traffic_speed, size=n),
            lane=np.asarray(LANES)[rng.integers(len(LANES), size=n)],
            colour=np.asarray(TRAFFIC_COLOURS, dtype=np.float32)[rng.integers(len(TRAFFIC_COLOURS), size=n)],
        )
        self._traffic_prior = (self.state.position - 100.0, span)  # starts ~ U(origin, origin + span)
        self._visited: list[tuple[float, float]] = []  # (position, time) before every step
        self._object_redraw: tuple[int, int, dict[int, int]] | None = None  # (first index, seed, {index: seed})
        if redraw is not None:
            self._redraw(redraw)

    def states(self) -> tuple[tuple[float, float], ...]:
        """(position, time) of every state the car has been in so far, the current one last."""
        return (*self._visited, (self.state.position, self.state.time))

    def _redraw(self, r: Redraw) -> None:
        """Apply `r` to this freshly made world (see Redraw): curves, roadside objects, other cars."""
        sp = self.spec
        rng = np.random.default_rng((int(r.seed), 0x5EED))
        view = sp.draw_distance if r.view is None else r.view
        reach = max(p for p, _ in r.states) + view + 1.0  # the road centre is read just past the draw distance
        beyond = reach if r.beyond is None else min(r.beyond, reach)
        self.track.redraw_beyond(beyond, rng)
        first = int(beyond / sp.object_spacing) + 1
        named = {int(i): int(rng.integers(1 << 30)) for i in r.objects}
        self._object_redraw = (first, int(rng.integers(1 << 30)), named)

        tr = self.traffic
        seen = cars_in_view(r.states, tr.start, tr.speed, view)
        todo = np.union1d(np.flatnonzero(~seen), np.asarray(r.cars, dtype=np.int64))
        origin, span = self._traffic_prior
        while len(todo):  # rejection sampling from the prior restricted to out of view at every state
            start = origin + rng.uniform(0, span, size=len(todo))
            speed = rng.uniform(*sp.traffic_speed, size=len(todo))
            ok = ~cars_in_view(r.states, start, speed, view)
            tr.start[todo[ok]], tr.speed[todo[ok]] = start[ok], speed[ok]
            tr.lane[todo[ok]] = np.asarray(LANES)[rng.integers(len(LANES), size=int(ok.sum()))]
            tr.colour[todo[ok]] = np.asarray(TRAFFIC_COLOURS, dtype=np.float32)[
                rng.integers(len(TRAFFIC_COLOURS), size=int(ok.sum()))
            ]
            todo = todo[~ok]

    def _object_rng(self, i: int) -> np.random.Generator:
        """The generator of roadside object pair i: the episode's, or a re-drawn one's (Redraw)."""
        if self._object_redraw is not None:
            first, seed, named = self._object_redraw
            if i in named:
                return np.random.default_rng((named[i], i))
            if i >= first:
                return np.random.default_rng((seed, i))
        return np.random.default_rng((self._object_seed, i))

    # --- dynamics ---------------------------------------------------------------------------
    def step(self, action: int) -> None:
        """Advance one pixel frame (1/FPS s) under `action` (an index into ACTION_NAMES)."""
        sp, st = self.spec, self.state
        self._visited.append((st.position, st.time))
        dt = 1.0 / FPS
        if action == ACCEL:
            st.speed += sp.accel * dt
        elif action == BRAKE:
            st.speed -= sp.brake * dt
        else:
            st.speed += (sp.cruise_speed - st.speed) * sp.cruise_rate * dt
        if abs(st.lateral) > 1.15 and st.speed > sp.offroad_max_speed:
            st.speed -= 3 * sp.brake * dt
        # Blocked by a car just ahead in the same lane: follow it at its speed.
        gap = self.traffic.positions(st.time) - st.position
        ahead = (gap > 0) & (gap < sp.car_length + 1.0) & (np.abs(self.traffic.lane - st.lateral) < 0.45)
        if ahead.any():
            st.speed = min(st.speed, float(self.traffic.speed[ahead].min()))
        st.speed = float(np.clip(st.speed, 0.0, sp.max_speed))
        frac = st.speed / sp.max_speed
        steer = {LEFT: -1.0, RIGHT: 1.0}.get(action, 0.0)
        st.steer += (steer - st.steer) * 0.5
        st.lateral += steer * sp.steer_rate * dt * (0.35 + 0.65 * frac)
        if steer == 0.0:  # lane keeping: towards the nearest lane centre, or back onto the road
            lanes = np.asarray(LANES)
            target = lanes[np.argmin(np.abs(lanes - st.lateral))]
            st.lateral += (target - st.lateral) * (1.0 - np.exp(-sp.assist_rate * dt * (0.3 + 0.7 * frac)))
        k = float(self.track.curvature_at(st.position))
        st.lateral -= k * sp.centrifugal * st.speed * frac * dt * 8.0
        st.lateral = float(np.clip(st.lateral, -2.3, 2.3))
        st.background -= k * st.speed * dt * 60.0
        st.position += st.speed * dt
        st.time += dt

    # --- projection -------------------------------------------------------------------------
    def _project(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """Depth samples ahead → (z, screen row, clip row, road-centre offset, horizon row).

        Row of depth z: hy + f·(h − Δe(z)) / z + f·slope, with Δe the road height above the car's and
        the camera pitched with the road under the car. The clip row is the running minimum from near
        to far: rows at or below it are already covered by nearer ground.
        """
        sp, st = self.spec, self.state
        H = self.height
        f = sp.focal * H
        z = np.geomspace(0.5, sp.draw_distance, 384)  # (S,)
        de = self.track.elevation_at(st.position + z) - self.track.elevation_at(st.position)
        pitch = f * sp.pitch_follow * self.track.slope_at(st.position)
        horizon = sp.horizon * H + pitch
        rows = horizon + f * (sp.cam_height - de) / z  # (S,)
        clip = np.minimum.accumulate(rows)
        # Road centre: the double integral of curvature ahead, on a uniform grid.
        zz = np.linspace(0.0, sp.draw_distance * 4, 512)
        dz = zz[1] - zz[0]
        heading = np.cumsum(self.track.curvature_at(st.position + zz)) * dz
        offset = np.interp(z, zz, np.cumsum(heading) * dz)  # (S,)
        return z, rows, clip, offset, horizon

    # --- rendering --------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        """The current view as uint8 [H, W, 3]."""
        sp, st = self.spec, self.state
        H, W = self.height, self.width
        sky_top, haze, mnt, grass_a, grass_b, road_a, road_b = self.palette
        img = np.empty((H, W, 3), dtype=np.float32)
        xs = np.arange(W, dtype=np.float32) + 0.5  # (W,)
        z_s, rows_s, clip_s, offset_s, horizon = self._project()

        # 1. Sky gradient down to the horizon, haze below it, and a mountain silhouette on the horizon
        # scrolled by the accumulated curve heading.
        ys = np.arange(H, dtype=np.float32) + 0.5
        t = np.clip(ys / max(horizon, 1.0), 0.0, 1.0)[:, None]  # (H, 1)
        img[:] = (sky_top * (1 - t) + haze * t)[:, None, :]
        u = (xs + st.background * W / 128.0) / (4 * W) * 2 * np.pi  # (W,)
        prof = (self._mnt_amp[:, None] * np.sin(self._mnt_k[:, None] * u[None] + self._mnt_phase[:, None])).sum(0)
        mnt_top = horizon - (0.08 + 0.04 * prof) * H  # (W,)
        mask = (ys[:, None] >= mnt_top[None, :]) & (ys[:, None] < max(horizon, clip_s[-1]) + 1.0)
        img[mask] = mnt * 0.85 + haze * 0.15

        # 2. Ground rows: the depth of the nearest sample that reaches each row (clip line reversed).
        g0 = int(np.clip(np.floor(clip_s[-1]), 0, H))
        y = ys[g0:]  # (G,)
        z = np.interp(y, clip_s[::-1], z_s[::-1])  # (G,)
        centre_world = np.interp(z, z_s, offset_s) - st.lateral
        scale = sp.focal * W / z  # pixels per lateral unit at that depth, (G,)
        centre_px = W / 2 + centre_world * scale * sp.road_half_width
        half = sp.road_half_width * scale
        stripe = (np.floor((st.position + z) / sp.stripe_len) % 2).astype(np.int64)  # (G,) light = 1
        rel = np.abs(xs[None, :] - centre_px[:, None]) / half[:, None]  # 0 at the centre, 1 at the edge
        # Surface class per pixel (0 grass, 1 road, 2 rumble strip, 3 lane divider), then one lookup in a
        # per-row table of (class, dark/light stripe) colours already blended with the fog of that row.
        cls = (rel < 1.0).astype(np.int64)
        cls[(rel >= 1.0) & (rel < 1.15)] = 2
        cls[np.abs(rel - 1 / 3) < 0.05] = 3  # dashed dividers of 3 lanes, at ±1/3 (drawn on light stripes)
        white, red, paint = np.float32([235, 235, 235]), np.float32([220, 40, 40]), np.float32([240, 240, 200])
        table = np.stack([grass_b, grass_a, road_b, road_a, white, red, road_b, paint])  # (8, 3)
        fog = self._fog(z)[:, None, None].astype(np.float32)  # (G, 1, 1)
        table = table[None] * (1 - fog) + haze * fog  # (G, 8, 3)
        ground = table[np.arange(len(z))[:, None], cls * 2 + stripe[:, None]]  # (G, W, 3)
        below = (y >= clip_s[-1])[:, None, None]  # the first row may lie above the farthest ground
        img[g0:] = np.where(below, ground, img[g0:])

        # 3. Roadside objects and traffic, far to near, each clipped by the ground in front of it.
        self._draw_scenery(img, z_s, rows_s, clip_s, offset_s)
        # 4. The car sprite.
        self._draw_car(img)
        return np.clip(img + 0.5, 0, 255).astype(np.uint8)

    def _fog(self, z: np.ndarray | float) -> np.ndarray:
        sp = self.spec
        return np.clip((np.asarray(z) - 4.0) / (sp.draw_distance - 4.0), 0, 1) ** 0.8

    def _draw_scenery(
        self, img: np.ndarray, z_s: np.ndarray, rows_s: np.ndarray, clip_s: np.ndarray, offset_s: np.ndarray
    ) -> None:
        sp, st = self.spec, self.state
        W = self.width
        haze = self.palette[1]
        items: list[tuple[float, int, float, tuple | np.ndarray]] = []  # (z, kind, lateral, colour)
        first = int(np.ceil((st.position + 0.8) / sp.object_spacing))
        last = int((st.position + sp.draw_distance) / sp.object_spacing)
        for i in range(first, last + 1):
            r = self._object_rng(i)
            for side in (-1.0, 1.0):
                kind = int(r.integers(3))  # 0 tree, 1 pine, 2 post
                lat = side * (1.45 + r.uniform(0.0, 0.8)) * sp.road_half_width
                items.append((i * sp.object_spacing - st.position, kind, lat, ()))
        gaps = self.traffic.positions(st.time) - st.position
        for j in np.flatnonzero((gaps > 1.0) & (gaps < sp.draw_distance)):
            items.append((float(gaps[j]), 3, float(self.traffic.lane[j]), self.traffic.colour[j]))
        for z, kind, lat, colour in sorted(items, key=lambda it: -it[0]):
            scale = sp.focal * W / z  # pixels per lateral unit
            cx = W / 2 + (float(np.interp(z, z_s, offset_s)) - st.lateral + lat) * scale
            base = float(np.interp(z, z_s, rows_s))
            # Nearer ground hides what is below its clip row (a crest in front of the object).
            nearer = z_s < z
            clip = float(clip_s[nearer][-1]) if nearer.any() else float(self.height)
            fog = float(self._fog(z))
            if kind == 3:
                self._draw_other_car(img, cx, base, scale, min(clip, base), fog, haze, colour)
            else:
                size = scale * (0.9 if kind != 2 else 0.5) * 1.44
                self._draw_sprite(img, kind, cx, base, size, min(clip, base), fog, haze)

    @staticmethod
    def _draw_sprite(
        img: np.ndarray, kind: int, cx: float, base: float, h: float, clip: float, fog: float, haze: np.ndarray
    ) -> None:
        H, W = img.shape[:2]
        if h < 0.8 or cx + h < 0 or cx - h > W:
            return
        y0, y1 = max(int(base - h), 0), min(int(np.ceil(clip)), H)
        x0, x1 = max(int(cx - h * 0.5), 0), min(int(np.ceil(cx + h * 0.5)), W)
        if y1 <= y0 or x1 <= x0:
            return
        yy = (np.arange(y0, y1, dtype=np.float32) + 0.5 - base) / h  # (-1, 0]: -1 top, 0 ground
        xx = (np.arange(x0, x1, dtype=np.float32) + 0.5 - cx) / h  # about (-0.5, 0.5)
        Y, X = yy[:, None], xx[None, :]  # broadcast to (rows, cols)
        region = img[y0:y1, x0:x1]
        if kind == 0:  # round tree
            trunk = (np.abs(X) < 0.06) & (Y > -0.35)
            crown = (X / 0.32) ** 2 + ((Y + 0.6) / 0.36) ** 2 < 1.0
            layers = ((trunk, (100, 70, 40)), (crown, (30, 120, 40)))
        elif kind == 1:  # pine
            trunk = (np.abs(X) < 0.05) & (Y > -0.2)
            crown = (Y < -0.15) & (Y > -1.0) & (np.abs(X) < 0.28 * (Y + 1.0) / 0.85)
            layers = ((trunk, (90, 60, 35)), (crown, (20, 90, 50)))
        else:  # striped post / sign
            pole = (np.abs(X) < 0.05) & (Y > -0.9)
            sign = (np.abs(X) < 0.3) & (Y > -1.0) & (Y < -0.7)
            layers = ((pole, (230, 230, 230)), (sign, (230, 190, 30)))
        for m, col in layers:
            region[m] = np.float32(col) * (1 - fog) + haze * fog

    @staticmethod
    def _draw_other_car(
        img: np.ndarray,
        cx: float,
        base: float,
        scale: float,
        clip: float,
        fog: float,
        haze: np.ndarray,
        colour: np.ndarray,
    ) -> None:
        """Another car seen from behind: 0.55 units wide, 0.42 high, scaled by depth like the road."""
        H, W = img.shape[:2]
        w, h = 0.55 * scale, 0.42 * scale
        if h < 0.8 or cx + w < 0 or cx - w > W:
            return
        y0, y1 = max(int(base - h), 0), min(int(np.ceil(clip)), H)
        x0, x1 = max(int(cx - w / 2), 0), min(int(np.ceil(cx + w / 2)), W)
        if y1 <= y0 or x1 <= x0:
            return
        Y = ((np.arange(y0, y1, dtype=np.float32) + 0.5 - base) / h)[:, None]  # (-1, 0]
        X = ((np.arange(x0, x1, dtype=np.float32) + 0.5 - cx) / w)[None, :]  # (-0.5, 0.5)
        region = img[y0:y1, x0:x1]
        body = (np.abs(X) < 0.5) & (Y > -0.6)
        roof = (np.abs(X) < 0.36) & (Y <= -0.6)
        window = (np.abs(X) < 0.3) & (Y > -0.92) & (Y < -0.66)
        lights = (np.abs(np.abs(X) - 0.34) < 0.1) & (Y > -0.45) & (Y < -0.3)
        tyres = (np.abs(np.abs(X) - 0.36) < 0.1) & (Y > -0.12)
        for m, col in (
            (body | roof, colour),
            (window, (50, 60, 80)),
            (lights, (230, 40, 40)),
            (tyres, (20, 20, 20)),
        ):
            region[m] = np.float32(col) * (1 - fog) + haze * fog

    def _draw_car(self, img: np.ndarray) -> None:
        H, W = img.shape[:2]
        st = self.state
        cx = W / 2 + st.steer * W * 0.02
        cy = H * 0.93
        w, h = W * 0.26, H * 0.13
        y0, y1 = int(cy - h), int(cy)
        x0, x1 = max(int(cx - w / 2) - 2, 0), min(int(cx + w / 2) + 3, W)
        yy = (np.arange(y0, y1, dtype=np.float32) + 0.5 - cy) / h  # (-1, 0)
        xx = (np.arange(x0, x1, dtype=np.float32) + 0.5 - cx) / w  # about (-0.5, 0.5)
        Y, X = yy[:, None], xx[None, :]  # broadcast to (rows, cols)
        Xs = X - st.steer * 0.12 * (Y + 1.0)  # lean the roof towards the turn
        region = img[y0:y1, x0:x1]
        shadow = (np.abs(X) < 0.52) & (Y > -0.12)
        body = (np.abs(X) < 0.48) & (Y > -0.6) & (Y < -0.08)
        roof = (np.abs(Xs) < 0.32) & (Y >= -1.0) & (Y < -0.6)
        window = (np.abs(Xs) < 0.26) & (Y > -0.92) & (Y < -0.66)
        lights_l = (np.abs(X + 0.34 + st.steer * 0.04) < 0.09) & (Y > -0.45) & (Y < -0.32)
        lights_r = (np.abs(X - 0.34 + st.steer * 0.04) < 0.09) & (Y > -0.45) & (Y < -0.32)
        tyres = ((np.abs(X + 0.36) < 0.1) | (np.abs(X - 0.36) < 0.1)) & (Y > -0.18)
        for m, col in (
            (shadow, (30, 30, 30)),
            (body, (200, 30, 40)),
            (roof, (180, 25, 35)),
            (window, (60, 80, 110)),
            (lights_l | lights_r, (255, 230, 80)),
            (tyres, (20, 20, 20)),
        ):
            region[m] = np.float32(col)


def render_episode(
    seed: int,
    actions: np.ndarray | list[int],
    height: int = 96,
    width: int = 96,
    supersample: int = 2,
    scene: str | None = None,
    redraw: Redraw | None = None,
    spec: WorldSpec | None = None,
) -> np.ndarray:
    """Render frame 0 and then one frame after each of `actions[1:]` (uint8 [T, H, W, 3]).

    Frame t shows the world after actions[1..t] were applied; actions[0] has no effect (there is no
    motion before the first frame), so the action list and the frame list have the same length T.
    `scene` picks the palette (default `scene_for_seed(seed)`); everything else comes from the seed.
    Each frame is rendered at `supersample`× the size and box-filtered down, which removes the
    flicker of far stripes and lane dashes at small sizes.
    `redraw` draws part of the seed's randomness again (`Redraw`, `hidden_future`): an alternative future
    of the same start and actions (training/fidelity_bound.py). `spec`: the world's constants (default `WorldSpec()`).
    """
    s = supersample
    world = RoadWorld(seed, height * s, width * s, spec=spec, scene=scene, redraw=redraw)
    actions = np.asarray(actions, dtype=np.int64)
    frames = np.empty((len(actions), height, width, 3), dtype=np.uint8)
    for t in range(len(actions)):
        if t:
            world.step(int(actions[t]))
        big = world.render().astype(np.float32)  # (H·s, W·s, 3)
        box = sum(big[i::s, j::s] for i in range(s) for j in range(s))  # (H, W, 3); faster than a mean
        frames[t] = (box / (s * s) + 0.5).astype(np.uint8)
    return frames


def hidden_future(
    seed: int, actions: np.ndarray | list[int], after: int, redraw_seed: int, spec: WorldSpec | None = None
) -> Redraw:
    """The Redraw of everything episode `seed` hides up to frame `after` under `actions` (render_episode's).

    `render_episode(seed, actions, ..., redraw=hidden_future(seed, actions, t, k))` has frames 0..t bit for bit
    those of the episode, and after them one alternative future: the k-th, of the curves, roadside objects and
    cars that no state up to frame t had within its draw distance. The car's states do not depend on the image
    size or the scene, so one Redraw serves every size.
    """
    world = RoadWorld(seed, 8, 8, spec=spec)
    for a in np.asarray(actions, dtype=np.int64)[1 : after + 1]:
        world.step(int(a))
    return Redraw(redraw_seed, world.states())


def random_actions(rng: np.random.Generator, num_latent_frames: int) -> np.ndarray:
    """A random policy, one action per latent frame [F]: steering held 1-2 latent frames, others 1-4.

    Steering is rarer and shorter than in v1 and the car keeps its lane by itself between steers (see
    RoadWorld), so episodes show driving on the road (about 95 % of the time) with lane changes and now
    and then a trip onto the grass; throttle and brake vary the speed around the cruise speed. Expand with `latent_to_pixel_actions`: pixel frame t ≥ 1 belongs to latent frame
    ⌈t / 4⌉ and carries that latent frame's action, so the latent model sees exactly the action that
    moved its frames.
    """
    probs = np.array([0.42, 0.13, 0.13, 0.19, 0.13])
    lat = np.empty(num_latent_frames, dtype=np.int64)
    f = 0
    while f < num_latent_frames:
        a = int(rng.choice(len(ACTION_NAMES), p=probs))
        n = int(rng.integers(1, 3 if a in (LEFT, RIGHT) else 5))
        lat[f : f + n] = a
        f += n
    return lat


def latent_to_pixel_actions(latent_actions: np.ndarray, frames_per_latent: int = 4) -> np.ndarray:
    """Expand per-latent-frame actions [F] to per-pixel-frame actions [1 + 4·(F − 1)]."""
    latent_actions = np.asarray(latent_actions, dtype=np.int64)
    rest = np.repeat(latent_actions[1:], frames_per_latent)
    return np.concatenate([latent_actions[:1], rest])
