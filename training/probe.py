"""The fidelity bar's own quantity, measured while a model trains: which minutes of a recipe pay.

`training.evaluate.fidelity` scores a finished bundle: per-frame PSNR of the first 2 s after one true block
against the renderer. The recipe's choices (how long each phase runs, which rollouts it trains on) were so far
judged only after a whole device run. `FidelityProbe` asks the same question every few seconds of training, on
episodes of a tuning seed that neither training (seed 0) nor the evaluation (seed 1) uses, through the training
loop's own batched rollout (the inference pipeline with the training cache) and the autoencoder's whole-clip
decode, with fixed noise so that successive probes differ only by the weights.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.scheduler import SamplingConfig
from inferix_core.vae.tiny_ae import TinyCausalAE
from training.world.compare import psnr

from .data import DatasetSpec, RenderJob
from .evaluate import fidelity_frames, to_uint8_batch
from .train_ae import to_video
from .train_world import WorldModel, rollout

PROBE_SEED = 2  # the tuning seed (training/tune_inference.py): not training's 0, not the evaluation's 1
NOISE_SEED = 0  # the same noise at every probe


def probe_spec(data: DatasetSpec, episodes: int, block_frames: int, fps: int, seconds: float = 2.0) -> DatasetSpec:
    """Episodes of the tuning seed in `data`'s world and size, one true block plus enough blocks for `seconds`."""
    return DatasetSpec(
        num_episodes=episodes,
        num_latent_frames=fidelity_frames(seconds, fps, block_frames)[0],
        height=data.height,
        width=data.width,
        seed=PROBE_SEED,
        scenes=data.scenes,
        world=dict(data.world),
    )


@dataclass
class FidelityProbe:
    """Rendered truth (E, T, H, W, 3) and its latents; `__call__(model)` → the mean PSNR of the scored frames."""

    truth: np.ndarray
    latents: torch.Tensor  # (E, F, C, h, w), normalised as the training pool's
    actions: torch.Tensor  # (E, F, A) one-hot
    scene_ids: torch.Tensor  # (E,)
    ae: TinyCausalAE
    sampling: SamplingConfig
    cache: KVCacheConfig
    scored: slice  # the pixel frames after the true block, `seconds` long
    fps: int

    @classmethod
    def build(
        cls,
        job: RenderJob,
        ae: TinyCausalAE,
        sampling: SamplingConfig,
        cache: KVCacheConfig,
        action_dim: int,
        device: torch.device,
        fps: int,
        seconds: float = 2.0,
    ) -> FidelityProbe:
        job.wait()
        truth = np.array(job.frames())  # a copy: the render folder may go
        with torch.no_grad():
            latents = ae.encode(to_video(truth, device)).permute(0, 2, 1, 3, 4).float()
        scored = fidelity_frames(seconds, fps, sampling.block_frames)[1]
        actions = torch.eye(action_dim, device=device)[torch.from_numpy(job.actions).to(device)]
        scene_ids = torch.from_numpy(job.scene_ids).to(device)
        return cls(truth, latents, actions, scene_ids, ae, sampling, cache, scored, fps)

    @torch.no_grad()
    def generate(self, model: WorldModel) -> np.ndarray:
        """The model's frames (E, T, H, W, 3): the true block, then its own blocks, decoded as one clip."""
        was = model.training
        model.eval()
        try:
            own = rollout(
                model, self.sampling, self.cache, self.latents, self.actions, self.scene_ids,
                self.sampling.block_frames, seed=NOISE_SEED,
            )  # fmt: skip
        finally:
            model.train(was)
        return to_uint8_batch(self.ae.decode(own.permute(0, 2, 1, 3, 4)))

    def __call__(self, model: WorldModel) -> dict:
        t0 = time.perf_counter()
        frames = self.generate(model)
        per_frame = np.stack([psnr(g[self.scored], t[self.scored]) for g, t in zip(frames, self.truth)])
        half = max(1, self.fps // 2)
        return {
            "psnr": float(per_frame.mean()),
            "psnr_per_half_second": [
                round(float(per_frame[:, a : a + half].mean()), 3) for a in range(0, per_frame.shape[1], half)
            ],
            "seconds": round(time.perf_counter() - t0, 3),
        }


def main(argv: list[str] | None = None) -> dict:
    """The probe of a finished bundle beside `evaluate.fidelity` on the same tuning-seed episodes (which differ
    in the cache's sink, the streamed decode and the noise): how far the probe's number is from the bar's."""
    import argparse
    import json
    import tempfile

    from inferix_core.models.bundled import load_bundled
    from training.world import FPS

    from .evaluate import fidelity, world_spec_of
    from .settings import CACHE, SAMPLING

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--bundle", default=None, help="folder with the bundle's files (default: the shipped one)")
    p.add_argument("--episodes", type=int, default=24)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    bundle = load_bundled(args.bundle)
    cfg = bundle.config
    data = DatasetSpec(1, height=cfg["height"], width=cfg["width"], world=asdict(world_spec_of(cfg)))
    model = WorldModel(bundle.transformer.config, bundle.prompt_encoder.config)
    model.transformer, model.prompt = bundle.transformer, bundle.prompt_encoder
    sampling, cache = SamplingConfig(**SAMPLING), KVCacheConfig(**CACHE)
    with tempfile.TemporaryDirectory() as work:
        job = RenderJob(work, probe_spec(data, args.episodes, sampling.block_frames, FPS), workers=args.threads)
        probe = FidelityProbe.build(job, bundle.vae, sampling, cache, bundle.transformer.config.action_dim,
                                    torch.device("cpu"), FPS)  # fmt: skip
    with torch.inference_mode():
        out = {"probe": probe(model), "fidelity": fidelity(bundle, args.episodes, seed=PROBE_SEED)}
    out["fidelity"] = {k: out["fidelity"][k] for k in ("psnr_mean", "psnr_per_half_second")}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
