"""Episodes of the driving world for training: rendered in worker processes into a memory-mapped file.

An episode is `num_latent_frames` latent frames of random held actions (one per latent frame) and the
1 + 4·(F − 1) pixel frames they produce. Episode i of a dataset uses world seed `seed·1_000_003 + i`,
so training (seed 0) and held-out evaluation (seed 1) never share a track. Rendering can run in the
background (`RenderJob`) while the autoencoder trains on the episodes that are already done.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferix_core.world import latent_to_pixel_actions, random_actions, render_episode


def episode_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def episode_actions(seed: int, index: int, num_latent_frames: int) -> np.ndarray:
    """The latent-frame actions [F] of episode `index` (deterministic)."""
    rng = np.random.default_rng((seed, index, 12345))
    return random_actions(rng, num_latent_frames)


@dataclass(frozen=True)
class DatasetSpec:
    num_episodes: int
    num_latent_frames: int = 24
    height: int = 64
    width: int = 64
    seed: int = 0

    @property
    def num_frames(self) -> int:
        return 1 + 4 * (self.num_latent_frames - 1)

    @property
    def frame_shape(self) -> tuple[int, int, int, int, int]:
        return (self.num_episodes, self.num_frames, self.height, self.width, 3)


def _render_chunk(args: tuple) -> tuple[int, int]:
    path, spec_dict, start, stop = args
    spec = DatasetSpec(**spec_dict)
    frames = np.memmap(path, dtype=np.uint8, mode="r+", shape=spec.frame_shape)
    for i in range(start, stop):
        lat = episode_actions(spec.seed, i, spec.num_latent_frames)
        frames[i] = render_episode(episode_seed(spec.seed, i), latent_to_pixel_actions(lat), spec.height, spec.width)
    frames.flush()
    return start, stop


class RenderJob:
    """Renders a dataset into `<dir>/frames.u8` with a process pool; reuses a finished one on resume."""

    def __init__(self, directory: str | Path, spec: DatasetSpec, workers: int | None = None, chunk: int = 16):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.path = self.dir / "frames.u8"
        self.actions = np.stack(
            [episode_actions(spec.seed, i, spec.num_latent_frames) for i in range(spec.num_episodes)]
        )
        meta = self.dir / "spec.json"
        self._done_flag = self.dir / "complete"
        if self._done_flag.exists() and meta.exists() and json.loads(meta.read_text()) == spec.__dict__:
            self._pool, self._results = None, []
            self._ready = spec.num_episodes
            return
        meta.write_text(json.dumps(spec.__dict__))
        np.memmap(self.path, dtype=np.uint8, mode="w+", shape=spec.frame_shape).flush()
        chunks = [
            (str(self.path), spec.__dict__, a, min(a + chunk, spec.num_episodes))
            for a in range(0, spec.num_episodes, chunk)
        ]
        workers = workers or max(1, (os.cpu_count() or 2) - 1)
        self._pool = mp.get_context("fork").Pool(workers)
        self._results = [self._pool.apply_async(_render_chunk, (c,)) for c in chunks]
        self._ready = 0

    def frames(self) -> np.ndarray:
        return np.memmap(self.path, dtype=np.uint8, mode="r", shape=self.spec.frame_shape)

    def ready_episodes(self) -> np.ndarray:
        """Indices of the episodes rendered so far."""
        if self._pool is None:
            return np.arange(self.spec.num_episodes)
        done = [r.get() for r in self._results if r.ready()]
        return np.concatenate([np.arange(a, b) for a, b in done]) if done else np.zeros(0, dtype=np.int64)

    def wait(self) -> None:
        if self._pool is not None:
            for r in self._results:
                r.get()
            self._pool.close()
            self._pool.join()
            self._pool = None
            self._done_flag.write_text("ok")


def render_eval_episode(
    index: int, num_latent_frames: int, height: int = 64, width: int = 64, seed: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """A held-out episode (seed 1 by default): (frames uint8 [T, H, W, 3], latent actions [F])."""
    lat = episode_actions(seed, index, num_latent_frames)
    return render_episode(episode_seed(seed, index), latent_to_pixel_actions(lat), height, width), lat
