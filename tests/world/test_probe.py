"""training/probe.py scores a model during training as `evaluate.fidelity` scores a bundle: the frames after one
true block against the renderer. A model that reproduces the true latents scores the autoencoder's own PSNR
(computed here independently), a different model scores differently, and probing leaves the training mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.scheduler import SamplingConfig
from inferix_core.text.vocabulary import VocabularyConfig
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE
from training import probe as probe_mod
from training.data import DatasetSpec, RenderJob, scene_word_lists
from training.evaluate import to_uint8
from training.train_bundled import SAMPLING, SMOKE_CACHE, wan_config
from training.train_world import WorldModel
from training.world import FPS
from training.world.compare import psnr


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.manual_seed(0)
    data = DatasetSpec(num_episodes=4, num_latent_frames=9, height=32, width=32)
    spec = probe_mod.probe_spec(data, 2, SAMPLING["block_frames"], FPS)
    job = RenderJob(tmp_path_factory.mktemp("probe"), spec, workers=1, chunk=1)
    ae = TinyCausalAE(TinyAEConfig(latent_channels=32, num_res_blocks=1, pixel_channels=(8, 8))).eval()
    words = scene_word_lists(data.scenes)
    vocab = VocabularyConfig.from_scenes(words, 4, default=data.scenes[0])
    model = WorldModel(wan_config(True, 4), vocab)
    sampling, cache = SamplingConfig(**SAMPLING), KVCacheConfig(**SMOKE_CACHE)
    probe = probe_mod.FidelityProbe.build(
        job, ae, sampling, cache, model.transformer.config.action_dim, torch.device("cpu"), FPS
    )
    return spec, probe, model, ae


def test_the_probe_covers_two_seconds_after_one_true_block_of_the_tuning_seed(setup):
    spec, probe, _, _ = setup
    assert spec.seed == probe_mod.PROBE_SEED not in (0, 1)
    first = 1 + 4 * (SAMPLING["block_frames"] - 1)
    assert probe.scored == slice(first, first + 2 * FPS) and probe.truth.shape[1] >= probe.scored.stop


def test_a_model_that_returns_the_truth_scores_the_autoencoders_own_psnr(setup, monkeypatch):
    _, probe, model, ae = setup
    monkeypatch.setattr(probe_mod, "rollout", lambda *a, **k: probe.latents.clone())
    got = probe(model)["psnr"]
    with torch.no_grad():
        expected = []
        for truth in probe.truth:
            video = torch.from_numpy(truth).permute(3, 0, 1, 2).unsqueeze(0).float() / 127.5 - 1
            recon = to_uint8(ae.decode(ae.encode(video)))
            expected.append(psnr(recon[probe.scored], truth[probe.scored]))
    assert np.isfinite(got) and got == pytest.approx(float(np.mean(expected)), abs=1e-6)


def test_the_probe_follows_the_weights_and_keeps_the_training_mode(setup):
    _, probe, model, _ = setup
    model.train()
    first = probe(model)
    assert model.training and np.isfinite(first["psnr"]) and len(first["psnr_per_half_second"]) == 4
    assert probe(model)["psnr"] == first["psnr"]  # fixed noise: the same weights score the same
    with torch.no_grad():
        model.transformer.head.head.weight.normal_(std=0.5)
    assert probe(model)["psnr"] != first["psnr"]


def test_the_command_sets_the_probe_beside_the_bar_on_a_bundle(tmp_path):
    from training.train_bundled import main as train

    train(["--out", str(tmp_path / "b"), "--work", str(tmp_path / "w"), "--smoke", "--probe-episodes", "0"])
    out = probe_mod.main(["--bundle", str(tmp_path / "b"), "--episodes", "1", "--threads", "1"])
    assert np.isfinite(out["probe"]["psnr"]) and np.isfinite(out["fidelity"]["psnr_mean"])
    assert len(out["probe"]["psnr_per_half_second"]) == len(out["fidelity"]["psnr_per_half_second"])
