"""Procedural worlds rendered with numpy, used to train and check the bundled world model."""

from .road import ACTION_NAMES, FPS, RoadWorld, latent_to_pixel_actions, random_actions, render_episode

__all__ = ["ACTION_NAMES", "FPS", "RoadWorld", "latent_to_pixel_actions", "random_actions", "render_episode"]
