"""Build a Matrix-Game 2.0 run from a `matrix_game2_*.safetensors` fixture's `info` metadata alone."""

from __future__ import annotations

import torch

from inferix_core.models.matrix_game2 import MatrixGameConditioning
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from tests.fixture_utils import fixture_weights, read_fixture, settings_from_metadata


def to_bfchw(t: torch.Tensor) -> torch.Tensor:
    """The fixtures' [B, C, F, H, W] latents → the pipeline's [B, F, C, H, W]."""
    return t.permute(0, 2, 1, 3, 4)


class FixtureNoise:
    """Feeds the stored initial noise and re-noise draws ([B, C, F, H, W] in the file) to the pipeline."""

    def __init__(self, tensors: dict):
        self.t = tensors

    def initial(self, start_frame, shape):
        return to_bfchw(self.t["noise"])[:, start_frame : start_frame + shape[1]]

    def step(self, block, step, shape):
        return to_bfchw(self.t[f"block{block}.step{step}.noise"])


def build(path):
    """(info, tensors, model, sampling, cache config, conditioning) of one fixture, all from its metadata."""
    info, tensors = read_fixture(path)
    cfg = WanConfig.from_dict(info["config"])
    model = CausalWanTransformer(cfg)
    model.load_state_dict({k: v.clone() for k, v in fixture_weights(path, info, tensors).items()}, strict=True)
    p = info["pipeline"]
    sampling, cache = settings_from_metadata(info)
    cond = MatrixGameConditioning(
        tensors["cond_concat"],
        tensors["visual_context"],
        tensors["keyboard_cond"],
        tensors.get("mouse_cond") if p["enable_mouse"] else None,
    )
    return info, tensors, model.eval(), sampling, cache, cond
