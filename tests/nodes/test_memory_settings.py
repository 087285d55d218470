"""Inferix Memory Settings → Load World Model: block swap, fp8 weights and placement reach the model."""

from __future__ import annotations

import pytest

from inferix_core.errors import ConfigError
from inferix_core.models.fp8 import count_fp8_linears
from inferix_core.models.memory import MemorySettings, parse_memory_size
from tests.fixture_utils import tiny_loader_inputs

FILES = tiny_loader_inputs()


def test_settings_reach_the_loaded_model(node_classes, models_dir):
    (settings,) = node_classes["InferixMemorySettings"]().EXECUTE_NORMALIZED(
        gpu_memory_gb=0.0, resident_blocks=1, fp8_weights=True, text_encoder="offload"
    )["result"]
    assert settings == MemorySettings(None, 1, True, "offload")
    out = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**FILES, memory=settings)
    (model,) = out["result"]
    assert model.transformer.block_swap.resident == 1
    assert count_fp8_linears(model.transformer, weight_only=True) > 0
    assert "block swap: 1 of 2 blocks resident" in out["ui"]["text"][0]
    plain = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**FILES)["result"][0]
    assert getattr(plain.transformer, "block_swap", None) is None


def test_widget_defaults_mean_no_budget_and_planned_blocks():
    from inferix_nodes.memory_settings import build_settings

    assert build_settings(0.0, -1, False, "device") == MemorySettings()
    assert build_settings(12.0, -1, False, "cpu").load_kwargs()["gpu_memory"] == 12 * 2**30


@pytest.mark.parametrize(("text", "gb"), [("24GB", 24.0), ("24 GiB", 24.0), ("7.5g", 7.5), ("16", 16.0)])
def test_parse_memory_size(text, gb):
    assert parse_memory_size(text) == gb


@pytest.mark.parametrize("text", ["", "lots", "-3GB", "0", "nanGB", "infGB"])
def test_parse_memory_size_refuses(text):
    with pytest.raises(ConfigError, match="like 24GB"):
        parse_memory_size(text)


def test_settings_validate():
    with pytest.raises(ConfigError, match="text_encoder_placement"):
        MemorySettings(text_encoder_placement="gpu")
    with pytest.raises(ConfigError, match="resident_blocks"):
        MemorySettings(resident_blocks=-2)
