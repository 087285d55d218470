"""The sky classifier is right on every renderer frame of every scene and catches a mixed sky."""

from __future__ import annotations

import numpy as np

from training.world import SCENES, latent_to_pixel_actions, random_actions, render_episode
from training.world.palette import MIN_PURITY, classify_sky, palette_agreement


def test_classifier_is_right_on_renderer_frames_of_every_scene() -> None:
    for seed in range(4):  # hilly and flat tracks, several starts
        acts = latent_to_pixel_actions(random_actions(np.random.default_rng(seed), 30))
        for scene in SCENES:
            frames = render_episode(seed, acts[::3], scene=scene)
            labels, purity = classify_sky(frames)
            assert np.all(labels == SCENES.index(scene)) and purity.min() == 1.0, (seed, scene, purity.min())
            assert palette_agreement(frames, scene)["agreement"] == 1.0


def test_classifier_flags_a_patchwork_sky() -> None:
    a = render_episode(0, [0], scene=SCENES[0])[0]
    b = render_episode(0, [0], scene=SCENES[1])[0]
    mixed = a.copy()
    mixed[:, 48:] = b[:, 48:]  # the right half of the sky from the other palette
    labels, purity = classify_sky(np.stack([a, b, mixed]))
    assert list(labels[:2]) == [0, 1] and purity[2] < MIN_PURITY
    assert palette_agreement(mixed[None], SCENES[0])["agreement"] == 0.0
