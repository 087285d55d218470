"""Episodes of the driving world for training: rendered in worker processes into a memory-mapped file.

An episode is `num_latent_frames` latent frames of random held actions (one per latent frame) and the
1 + 4·(F − 1) pixel frames they produce, in one scene (palette / time of day) of the world; episode i
has scene `scenes[i % len(scenes)]`, so every scene gets the same share, and its prompt is that scene's
words. Episode i of a dataset uses world seed `seed·1_000_003 + i`, so training (seed 0) and held-out
evaluation (seed 1) never share a track. Rendering is deterministic, so a fresh machine re-renders the
same dataset; it runs in the background (`RenderJob`) while something trains on the episodes that are
already done (`ready_episodes`, and `LatentPool` for the encoded latents).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from training.world import latent_to_pixel_actions, random_actions, render_episode, road


def episode_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def episode_actions(seed: int, index: int, num_latent_frames: int) -> np.ndarray:
    """The latent-frame actions [F] of episode `index` (deterministic)."""
    rng = np.random.default_rng((seed, index, 12345))
    return random_actions(rng, num_latent_frames)


def world_scenes() -> tuple[str, ...]:
    """The renderer's scene names, in its order."""
    return tuple(road.SCENES)


@dataclass(frozen=True)
class DatasetSpec:
    num_episodes: int
    num_latent_frames: int = 30
    height: int = 96
    width: int = 96
    seed: int = 0
    scenes: tuple[str, ...] = field(default_factory=world_scenes)
    world: dict = field(default_factory=dict)  # WorldSpec fields that differ from the renderer's defaults

    @property
    def world_spec(self) -> road.WorldSpec:
        return road.WorldSpec.from_dict(self.world)

    @property
    def num_frames(self) -> int:
        return 1 + 4 * (self.num_latent_frames - 1)

    @property
    def frame_shape(self) -> tuple[int, int, int, int, int]:
        return (self.num_episodes, self.num_frames, self.height, self.width, 3)

    def scene_index(self, index: int) -> int:
        return index % len(self.scenes)

    def to_dict(self) -> dict:
        return {**self.__dict__, "scenes": list(self.scenes), "world": dict(self.world)}

    @classmethod
    def from_dict(cls, d: dict) -> DatasetSpec:
        return cls(**{**d, "scenes": tuple(d["scenes"])})


def render_one(spec: DatasetSpec, index: int) -> np.ndarray:
    lat = episode_actions(spec.seed, index, spec.num_latent_frames)
    scene = spec.scenes[spec.scene_index(index)]
    return render_episode(
        episode_seed(spec.seed, index),
        latent_to_pixel_actions(lat),
        spec.height,
        spec.width,
        scene=scene,
        spec=spec.world_spec,
    )


def _render_chunk(args: tuple) -> tuple[int, int]:
    path, spec_dict, start, stop = args
    spec = DatasetSpec.from_dict(spec_dict)
    frames = np.memmap(path, dtype=np.uint8, mode="r+", shape=spec.frame_shape)
    for i in range(start, stop):
        frames[i] = render_one(spec, i)
    frames.flush()
    return start, stop


class RenderJob:
    """Renders a dataset into `<dir>/frames.u8` with a process pool; reuses a finished one on resume."""

    def __init__(self, directory: str | Path, spec: DatasetSpec, workers: int | None = None, chunk: int = 8):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.path = self.dir / "frames.u8"
        self.actions = np.stack(
            [episode_actions(spec.seed, i, spec.num_latent_frames) for i in range(spec.num_episodes)]
        )
        self.scene_ids = np.array([spec.scene_index(i) for i in range(spec.num_episodes)], dtype=np.int64)
        meta = self.dir / "spec.json"
        self._done_flag = self.dir / "complete"
        if self._done_flag.exists() and meta.exists() and json.loads(meta.read_text()) == spec.to_dict():
            self._pool, self._results = None, []
            return
        self._done_flag.unlink(missing_ok=True)
        meta.write_text(json.dumps(spec.to_dict()))
        np.memmap(self.path, dtype=np.uint8, mode="w+", shape=spec.frame_shape).flush()
        chunks = [
            (str(self.path), spec.to_dict(), a, min(a + chunk, spec.num_episodes))
            for a in range(0, spec.num_episodes, chunk)
        ]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
        workers = workers or max(1, cores - 1)  # the cores this process may use, one left for training
        self._pool = mp.get_context("fork").Pool(workers)
        self._results = [self._pool.apply_async(_render_chunk, (c,)) for c in chunks]

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


class LatentPool:
    """Normalised latents (N, F, C, h, w) on the device, encoded as the render job finishes episodes.

    `refresh()` encodes the newly rendered episodes; `ready` holds the indices encoded so far, so a
    training phase can start before rendering ends and its pool grows as it goes.
    """

    def __init__(self, job: RenderJob, encode, latent_shape: tuple[int, int, int], device: torch.device):
        self.job, self.encode, self.device = job, encode, device
        n, f = job.spec.num_episodes, job.spec.num_latent_frames
        self.latents = torch.zeros((n, f, *latent_shape), dtype=torch.float16, device=device)
        self.done = np.zeros(n, dtype=bool)
        self.ready = torch.zeros(0, dtype=torch.long, device=device)
        self.actions = torch.from_numpy(job.actions).to(device)
        self.scene_ids = torch.from_numpy(job.scene_ids).to(device)

    def refresh(self, batch: int = 32) -> int:
        """Encode every finished episode not yet encoded; returns how many are ready."""
        ready = self.job.ready_episodes()
        new = ready[~self.done[ready]] if len(ready) else ready
        if len(new):
            frames = self.job.frames()
            for a in range(0, len(new), batch):
                idx = np.sort(new[a : a + batch])
                self.latents[torch.from_numpy(idx).to(self.device)] = self.encode(frames[idx]).to(self.device)
            self.done[new] = True
            self.ready = torch.from_numpy(np.flatnonzero(self.done)).to(self.device)
        return len(self.ready)

    def sample(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        """`batch` random ready episode indices (on the device)."""
        pick = torch.randint(0, len(self.ready), (batch,), generator=gen).to(self.device)
        return self.ready[pick]


def render_eval_episode(
    index: int, num_latent_frames: int, height: int = 96, width: int = 96, seed: int = 1, scene: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A held-out episode (seed 1 by default): (frames uint8 [T, H, W, 3], latent actions [F])."""
    lat = episode_actions(seed, index, num_latent_frames)
    frames = render_episode(episode_seed(seed, index), latent_to_pixel_actions(lat), height, width, scene=scene)
    return frames, lat


def scene_word_lists(scenes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Scene → the words of its prompt (`road.scene_words`), lower-cased, in order."""
    from inferix_core.text.vocabulary import prompt_words

    out = {}
    for s in scenes:
        words = road.scene_words(s)
        out[s] = tuple(prompt_words(words if isinstance(words, str) else " ".join(words)))
    return out
