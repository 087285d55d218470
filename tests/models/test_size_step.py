"""WorldModel.size_step: the pixel multiple a model's frames need, its VAE's spatial stride × the patch's height
(issue #43: `SIZE_STEP = 16` was wrong for Wan 2.2, whose VAE strides 16: 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferix_core.models.registry import load_world_model

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("model", "vae", "family", "step"),
    [
        ("bundled", None, "bundled", 16),  # its tiny AE strides 8, patch 2
        ("causal_wan_tiny.safetensors", "wan_vae_tiny.safetensors", None, 16),  # Wan 2.1: 8 x 2
        ("wan22_ti2v_tiny.safetensors", "wan22_vae_tiny.safetensors", "longlive2", 32),  # Wan 2.2: 16 x 2
    ],
)
def test_size_step_is_the_vae_stride_times_the_patch(model, vae, family, step):
    path = model if model == "bundled" else str(FIXTURES / model)
    wm = load_world_model(path, vae_path=str(FIXTURES / vae) if vae else None, device="cpu", dtype="fp32")
    assert wm.size_step == step == wm.spatial_compression * wm.config.patch_size[1]
    if family:
        assert wm.family == family
