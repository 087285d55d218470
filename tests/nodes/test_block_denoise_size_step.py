"""Block Denoise checks the frame size against the loaded model's own multiple (`WorldModel.size_step`), not the
widgets' 16: a Wan 2.2 / LongLive 2.0 model (VAE stride 16 x patch 2) needs multiples of 32, and a size that is
only a multiple of 16 is refused in one line naming the nearest sizes that run, before any model work."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferix_core.errors import ConfigError
from inferix_core.models.registry import load_world_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def wan22():
    return load_world_model(
        str(FIXTURES / "wan22_ti2v_tiny.safetensors"),
        vae_path=str(FIXTURES / "wan22_vae_tiny.safetensors"),
        device="cpu",
        dtype="fp32",
    )


def test_a_wan22_model_refuses_a_size_that_is_only_a_multiple_of_16(node_classes, wan22, monkeypatch):
    import inferix_core.api as api

    def no_model_work(*args, **kwargs):
        raise AssertionError("planned a run the size check should have refused")

    monkeypatch.setattr(api, "plan_run", no_model_work)
    denoise = node_classes["InferixBlockDenoise"]()
    inputs = dict(world_model=wan22, prompt="", num_blocks=1, seconds=0.0, denoising_steps="", seed=0)
    with pytest.raises(ConfigError) as refused:
        denoise.EXECUTE_NORMALIZED(**inputs, width=64, height=48)  # 48 = 3 x 16, not a multiple of 32
    message = str(refused.value)
    assert "height must be a multiple of 32 (this longlive2 model: VAE stride 16 x patch 2)" in message
    assert message.endswith("got 48; try 64 or 32") and "\n" not in message


def test_the_size_hint_names_the_nearest_sizes_inside_the_limits(wan22):
    from inferix_nodes.block_denoise import MAX_SIZE, size_problem

    assert size_problem(64, 96, world_model=wan22) is None
    assert size_problem(500, 64, world_model=wan22).endswith("got 500; try 512 or 480")
    assert size_problem(8, 64, world_model=wan22).endswith("try 32")
    assert size_problem(100000, 64, world_model=wan22).endswith(f"try {MAX_SIZE}")
    assert size_problem(48, 48) is None  # without a model: the widgets' multiple, 16
