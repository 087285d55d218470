"""The v1 driving world (frozen): the world the v1 bundled weights were trained on, kept for them.

The current world is `road.py` (v2: scenes as conditions, hills, traffic, 96×96); this module only
exists so that the v1 weights can still be measured against their own ground truth, and goes away
when v2 weights ship. Do not change its output.

Deterministic from `(seed, actions)`: the seed fixes the track (curves), roadside objects, palette
and the car's starting state; the actions (one per pixel frame) steer and throttle the car. This is
the ground truth the bundled world model is trained on and measured against. No torch here.

Rendering is the classic "OutRun" projection: each screen row below the horizon is one ground
depth z = cam_depth / dy, the road centre at that depth is the double integral of the track
curvature ahead (the camera always faces along the road), and stripes alternate with track
distance so speed is visible as scrolling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACTION_NAMES: tuple[str, ...] = ("none", "steer_left", "steer_right", "accelerate", "brake")
NONE, LEFT, RIGHT, ACCEL, BRAKE = range(len(ACTION_NAMES))
FPS = 16

# Palettes: sky top, sky bottom (haze), mountains, grass light, grass dark, road light, road dark.
_PALETTES = (
    ((40, 90, 200), (170, 210, 240), (90, 110, 150), (60, 170, 60), (45, 140, 45), (110, 110, 115), (100, 100, 105)),
    ((240, 120, 60), (250, 200, 140), (120, 70, 90), (150, 160, 60), (125, 135, 45), (120, 105, 100), (108, 95, 92)),
    ((20, 30, 80), (90, 80, 140), (40, 40, 70), (40, 100, 70), (30, 80, 55), (70, 70, 85), (62, 62, 76)),
)


@dataclass(frozen=True)
class WorldSpec:
    """Constants of the world's physics and camera (units: road half-widths, seconds)."""

    horizon: float = 0.42  # horizon row as a fraction of the image height
    cam_depth: float = 1.8  # z of the bottom screen row
    road_half_width: float = 1.0
    stripe_len: float = 4.0  # track length of one stripe (light or dark)
    object_spacing: float = 9.0  # track distance between roadside objects
    draw_distance: float = 60.0
    max_speed: float = 20.0  # track units per second
    accel: float = 10.0
    brake: float = 16.0
    drag: float = 2.0
    steer_rate: float = 1.6  # lateral units per second at full speed
    centrifugal: float = 0.9
    offroad_max_speed: float = 7.0


@dataclass
class CarState:
    """The car: track distance, lateral offset (0 = road centre, ±1 = road edge), speed, steer."""

    position: float
    lateral: float
    speed: float
    steer: float = 0.0  # smoothed steering for the car sprite, in [-1, 1]
    background: float = 0.0  # accumulated horizontal scroll of the sky layer (pixels at W=128)


class Track:
    """Curvature along the track: smooth piecewise segments drawn from the seed."""

    def __init__(self, seed: int, length: float = 40000.0, resolution: float = 0.5):
        rng = np.random.default_rng(seed)
        self.resolution = resolution
        n = int(length / resolution)
        curv = np.zeros(n, dtype=np.float64)
        i = 0
        while i < n:
            seg = int(rng.uniform(40, 140) / resolution)
            k = 0.0 if rng.random() < 0.35 else rng.choice([-1.0, 1.0]) * rng.uniform(0.004, 0.016)
            curv[i : i + seg] = k
            i += seg
        # Smooth the steps so curves ease in and out (box filter over ~20 units).
        w = int(20 / resolution)
        kernel = np.ones(w) / w
        self.curvature = np.convolve(curv, kernel, mode="same")

    def curvature_at(self, s: np.ndarray | float) -> np.ndarray | float:
        idx = np.clip((np.asarray(s) / self.resolution).astype(np.int64), 0, len(self.curvature) - 1)
        return self.curvature[idx]


class RoadWorld:
    """One episode of the driving world: `step(action)` then `render()` gives the next frame."""

    def __init__(self, seed: int, height: int = 128, width: int = 128, spec: WorldSpec | None = None):
        self.spec = spec or WorldSpec()
        self.height, self.width = height, width
        rng = np.random.default_rng(seed + 7919)
        self.track = Track(seed)
        self.palette = np.array(_PALETTES[int(rng.integers(len(_PALETTES)))], dtype=np.float32)
        self.state = CarState(
            position=float(rng.uniform(0, 2000)),
            lateral=float(rng.uniform(-0.5, 0.5)),
            speed=float(rng.uniform(0.35, 0.75) * self.spec.max_speed),
        )
        self._object_seed = int(rng.integers(1 << 30))
        # Mountain profile: a periodic sum of sines over 4 screen widths.
        k = np.arange(1, 7)
        self._mnt_amp = rng.uniform(0.3, 1.0, size=6) / k
        self._mnt_phase = rng.uniform(0, 2 * np.pi, size=6)
        self._mnt_k = k

    # --- dynamics ---------------------------------------------------------------------------
    def step(self, action: int) -> None:
        """Advance one pixel frame (1/FPS s) under `action` (an index into ACTION_NAMES)."""
        sp, st = self.spec, self.state
        dt = 1.0 / FPS
        if action == ACCEL:
            st.speed += sp.accel * dt
        elif action == BRAKE:
            st.speed -= sp.brake * dt
        else:
            st.speed -= sp.drag * dt
        if abs(st.lateral) > 1.15 and st.speed > sp.offroad_max_speed:
            st.speed -= 3 * sp.brake * dt
        st.speed = float(np.clip(st.speed, 0.0, sp.max_speed))
        frac = st.speed / sp.max_speed
        steer = {LEFT: -1.0, RIGHT: 1.0}.get(action, 0.0)
        st.steer += (steer - st.steer) * 0.5
        st.lateral += steer * sp.steer_rate * dt * (0.35 + 0.65 * frac)
        k = float(self.track.curvature_at(st.position))
        st.lateral -= k * sp.centrifugal * st.speed * frac * dt * 8.0
        st.lateral = float(np.clip(st.lateral, -2.3, 2.3))
        st.background -= k * st.speed * dt * 60.0
        st.position += st.speed * dt

    # --- rendering --------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        """The current view as uint8 [H, W, 3]."""
        sp, st = self.spec, self.state
        H, W = self.height, self.width
        pal = self.palette
        sky_top, haze, mnt, grass_a, grass_b, road_a, road_b = pal
        img = np.empty((H, W, 3), dtype=np.float32)
        hy = round(sp.horizon * H)
        xs = np.arange(W, dtype=np.float32) + 0.5  # (W,)

        # 1. Sky gradient and a mountain silhouette scrolled by the accumulated curve heading.
        t = (np.arange(hy, dtype=np.float32) / max(hy - 1, 1))[:, None]  # (hy, 1)
        img[:hy] = (sky_top * (1 - t) + haze * t)[:, None, :]
        u = (xs + st.background * W / 128.0) / (4 * W) * 2 * np.pi  # (W,)
        prof = (self._mnt_amp[:, None] * np.sin(self._mnt_k[:, None] * u[None] + self._mnt_phase[:, None])).sum(0)
        mnt_h = (0.10 + 0.06 * prof) * H  # mountain height above the horizon in rows
        rows = np.arange(hy, dtype=np.float32)[:, None]  # (hy, 1)
        mask = rows >= hy - mnt_h[None, :]  # (hy, W)
        img[:hy][mask] = mnt * 0.85 + haze * 0.15

        # 2. Ground rows: depth per row, road centre from the double integral of curvature.
        y = np.arange(hy, H, dtype=np.float32) + 0.5  # (G,)
        dy = (y - hy) / (H - hy)
        z = sp.cam_depth / dy  # (G,) depth ahead of the camera
        zz = np.linspace(0.0, sp.draw_distance * 4, 512)
        k_ahead = self.track.curvature_at(st.position + zz)
        dz = zz[1] - zz[0]
        heading = np.cumsum(k_ahead) * dz
        offset = np.cumsum(heading) * dz  # lateral road-centre offset at distance zz
        centre_world = np.interp(z, zz, offset) - st.lateral  # (G,)
        scale = (W / 2) / z  # pixels per lateral unit at that depth, (G,)
        centre_px = W / 2 + centre_world * scale * sp.road_half_width * 0.9  # (G,)
        half = sp.road_half_width * scale * 0.9  # (G,)
        stripe = (np.floor((st.position + z) / sp.stripe_len) % 2).astype(bool)  # (G,)
        dxp = np.abs(xs[None, :] - centre_px[:, None])  # (G, W)
        rel = dxp / half[:, None]  # 0 at the centre, 1 at the road edge
        g = np.where(stripe[:, None, None], grass_a, grass_b) * np.ones((1, W, 1), np.float32)
        road = np.where(stripe[:, None, None], road_a, road_b)
        g = np.where((rel < 1.0)[..., None], road, g)
        rumble = (rel >= 1.0) & (rel < 1.15)
        rumble_col = np.where(stripe[:, None, None], np.float32([220, 40, 40]), np.float32([235, 235, 235]))
        g = np.where(rumble[..., None], rumble_col, g)
        lane = (np.abs(rel - 1 / 3) < 0.05) & stripe[:, None]  # dashed dividers of 3 lanes, at ±1/3
        g = np.where(lane[..., None], np.float32([240, 240, 200]), g)
        fog = np.clip((z - 4.0) / (sp.draw_distance - 4.0), 0, 1)[:, None, None] ** 0.8  # (G,1,1)
        img[hy:] = g * (1 - fog) + haze * fog

        # 3. Roadside objects, far to near.
        self._draw_objects(img, hy, zz, offset)
        # 4. The car sprite.
        self._draw_car(img)
        return np.clip(img + 0.5, 0, 255).astype(np.uint8)

    def _draw_objects(self, img: np.ndarray, hy: int, zz: np.ndarray, offset: np.ndarray) -> None:
        sp, st = self.spec, self.state
        H, W = self.height, self.width
        haze = self.palette[1]
        first = int(np.ceil((st.position + 0.8) / sp.object_spacing))
        last = int((st.position + sp.draw_distance) / sp.object_spacing)
        for i in range(last, first - 1, -1):
            s = i * sp.object_spacing
            z = s - st.position
            r = np.random.default_rng((self._object_seed, i))
            for side in (-1.0, 1.0):
                kind = int(r.integers(3))  # 0 tree, 1 pine, 2 post
                lat = side * (1.45 + r.uniform(0.0, 0.8)) * sp.road_half_width
                x_world = np.interp(z, zz, offset) - st.lateral + lat
                scale = (W / 2) / z * 0.9
                cx = W / 2 + x_world * scale
                base = hy + sp.cam_depth / z * (H - hy)
                size = scale * (0.9 if kind != 2 else 0.5)  # object height in pixels / 1.0 unit
                fog = min(max((z - 4.0) / (sp.draw_distance - 4.0), 0.0), 1.0) ** 0.8
                self._draw_sprite(img, kind, cx, base, size * 1.6, fog, haze)

    @staticmethod
    def _draw_sprite(
        img: np.ndarray, kind: int, cx: float, base: float, h: float, fog: float, haze: np.ndarray
    ) -> None:
        H, W = img.shape[:2]
        if h < 0.8 or cx + h < 0 or cx - h > W:
            return
        y0, y1 = max(int(base - h), 0), min(int(np.ceil(base)), H)
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
            c = np.float32(col) * (1 - fog) + haze * fog
            region[m] = c

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
    seed: int, actions: np.ndarray | list[int], height: int = 64, width: int = 64, supersample: int = 2
) -> np.ndarray:
    """Render frame 0 and then one frame after each of `actions[1:]` (uint8 [T, H, W, 3]).

    Frame t shows the world after actions[1..t] were applied; actions[0] has no effect (there is no
    motion before the first frame), so the action list and the frame list have the same length T.
    Each frame is rendered at `supersample`× the size and box-filtered down, which removes the
    flicker of far stripes and lane dashes at small sizes.
    """
    s = supersample
    world = RoadWorld(seed, height * s, width * s)
    actions = np.asarray(actions, dtype=np.int64)
    frames = np.empty((len(actions), height, width, 3), dtype=np.uint8)
    for t in range(len(actions)):
        if t:
            world.step(int(actions[t]))
        big = world.render().astype(np.float32)  # (H·s, W·s, 3)
        frames[t] = (big.reshape(height, s, width, s, 3).mean(axis=(1, 3)) + 0.5).astype(np.uint8)
    return frames


def random_actions(rng: np.random.Generator, num_latent_frames: int) -> np.ndarray:
    """A random policy, one action per latent frame [F], each held for 1-5 latent frames.

    Expand with `latent_to_pixel_actions`: pixel frame t ≥ 1 belongs to latent frame ⌈t / 4⌉ and
    carries that latent frame's action, so the latent model sees exactly the action that moved its
    frames.
    """
    probs = np.array([0.3, 0.2, 0.2, 0.2, 0.1])
    lat = np.empty(num_latent_frames, dtype=np.int64)
    f = 0
    while f < num_latent_frames:
        a = int(rng.choice(len(ACTION_NAMES), p=probs))
        n = int(rng.integers(1, 6))
        lat[f : f + n] = a
        f += n
    return lat


def latent_to_pixel_actions(latent_actions: np.ndarray, frames_per_latent: int = 4) -> np.ndarray:
    """Expand per-latent-frame actions [F] to per-pixel-frame actions [1 + 4·(F − 1)]."""
    latent_actions = np.asarray(latent_actions, dtype=np.int64)
    rest = np.repeat(latent_actions[1:], frames_per_latent)
    return np.concatenate([latent_actions[:1], rest])
