"""Which scene's palette a frame's sky shows: a per-frame classifier built from the renderer's own palettes.

The top `SKY_BAND` of every frame is always sky in the road world (mountains and sprites stay below it,
whatever the hills do), and each scene paints it with one vertical gradient from its palette's sky
colour to its haze colour. Each band pixel goes to the scene whose gradient colour at that row is
nearest; the frame's label is the majority and its purity the share of pixels that agree, so a sky
that is a patchwork of two palettes shows up as low purity even where the majority is right.
No thresholds are tuned: the references are exactly the table in road.py.
"""

from __future__ import annotations

import numpy as np

from .road import PALETTES, SCENES, WorldSpec

SKY_BAND = 0.1  # fraction of the frame height at the top that is always sky
MIN_PURITY = 0.9  # a frame counts as one palette only if this share of its sky pixels agree


def sky_references(height: int, spec: WorldSpec | None = None) -> np.ndarray:
    """Expected sky colour per band row for every scene, float [S, rows, 3] (flat ground, no pitch)."""
    spec = spec or WorldSpec()
    rows = max(1, int(SKY_BAND * height))
    t = ((np.arange(rows) + 0.5) / (spec.horizon * height))[:, None]  # (rows, 1)
    refs = [np.float64(PALETTES[s][0]) * (1 - t) + np.float64(PALETTES[s][1]) * t for s in SCENES]
    return np.stack(refs)


def classify_sky(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame scene index into SCENES and purity in [0, 1] of uint8 frames [T, H, W, 3]."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[None]
    refs = sky_references(frames.shape[1])  # (S, R, 3)
    band = frames[:, : refs.shape[1]].astype(np.float64)  # (T, R, W, 3)
    dist = ((band[:, None] - refs[None, :, :, None, :]) ** 2).sum(-1)  # (T, S, R, W)
    votes = dist.argmin(1).reshape(len(frames), -1)  # (T, R·W)
    counts = np.stack([(votes == s).sum(1) for s in range(len(SCENES))], 1)  # (T, S)
    labels = counts.argmax(1)
    return labels, counts.max(1) / votes.shape[1]


def palette_agreement(frames: np.ndarray, scene: str) -> dict:
    """How many frames show `scene`'s sky with at least MIN_PURITY of their sky pixels."""
    labels, purity = classify_sky(frames)
    target = SCENES.index(scene)
    ok = (labels == target) & (purity >= MIN_PURITY)
    return {
        "scene": scene,
        "frames": len(labels),
        "agreement": float(ok.mean()),
        "label_counts": {s: int((labels == i).sum()) for i, s in enumerate(SCENES)},
        "min_purity": float(purity.min()),
        "mixed_frames": int((purity < MIN_PURITY).sum()),
    }
