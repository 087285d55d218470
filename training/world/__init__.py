"""Procedural worlds rendered with numpy, used to train and check the bundled world model."""

from .road import (
    ACTION_NAMES,
    FPS,
    SCENE_WORDS,
    SCENES,
    RoadWorld,
    latent_to_pixel_actions,
    random_actions,
    render_episode,
    scene_for_seed,
    scene_from_prompt,
    scene_words,
)

__all__ = [
    "ACTION_NAMES",
    "FPS",
    "SCENES",
    "SCENE_WORDS",
    "RoadWorld",
    "latent_to_pixel_actions",
    "random_actions",
    "render_episode",
    "scene_for_seed",
    "scene_from_prompt",
    "scene_words",
]
