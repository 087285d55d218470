"""`inferix_core.workflow.settings`: widget values → LoadOptions, MemorySettings, KVCacheConfig (issue #43)."""

from __future__ import annotations

import dataclasses

import pytest

from inferix_core.cache import KVCacheConfig
from inferix_core.errors import ConfigError
from inferix_core.models.memory import MemorySettings
from inferix_core.models.options import LoadOptions
from inferix_core.models.registry import load_world_model
from inferix_core.workflow.settings import cache_config, load_options, memory_settings, model_file


def test_widgets_round_trip_to_load_options():
    widgets = dict(model="m.safetensors", vae="v.safetensors", preview_decoder="none", text_encoder="t.safetensors",
                   dtype="bf16", attention="sdpa", device="cpu", fp8=True, compile=True, family="longlive",
                   weights="generator", cuda_graphs=True)  # fmt: skip
    memory = memory_settings(dict(gpu_memory_gb=6.0, resident_blocks=2, fp8_weights=True, text_encoder="offload"))
    got = load_options(widgets, resolve=lambda folder, name: f"{folder}/{name}", memory=memory, lora=[("l.pt", 0.5)])
    assert got == LoadOptions(
        family="longlive", weights="generator", vae_path="vae/v.safetensors", preview_decoder_path=None,
        text_encoder_path="text_encoders/t.safetensors", dtype="bf16", device="cpu", attention="sdpa", fp8=True,
        compile=True, resident_blocks=2, fp8_weights=True, text_encoder_placement="offload", gpu_memory=6 * 2**30,
        lora=(("l.pt", 0.5),), cuda_graphs=True,
    )  # fmt: skip
    assert (
        model_file("model", "m.safetensors", lambda folder, name: f"{folder}/{name}")
        == "diffusion_models/m.safetensors"
    )
    assert model_file("model", "bundled") == "bundled" and model_file("vae", "bundled") is None
    # a workflow saved before the optional inputs (none given, or None / ""): the loader's defaults
    assert load_options({}) == load_options({"fp8": None, "family": "", "weights": None}) == LoadOptions()


def test_memory_and_cache_widgets_round_trip():
    assert memory_settings({}) == MemorySettings()
    assert memory_settings(dict(gpu_memory_gb=0.0, resident_blocks=-1, fp8_weights=False, text_encoder="device")) == (
        MemorySettings()
    )
    with pytest.raises(ConfigError, match="resident_blocks"):
        memory_settings({"resident_blocks": -2})
    widgets = dict(window_frames=12, sink_frames=3, page_frames=2, offload="always", gpu_budget_gb=1.5,
                   quantization="int4")  # fmt: skip
    assert cache_config(widgets) == KVCacheConfig(12, 3, page_frames=2, offload="always",
                                                  gpu_budget_bytes=int(1.5 * 2**30), quantization="int4")  # fmt: skip
    assert cache_config({}) == KVCacheConfig()
    with pytest.raises(ConfigError, match="between 1 and 4096, got 0"):
        cache_config({"window_frames": 0})
    with pytest.raises(ConfigError, match=r"sink_frames \(4\) must be smaller than window_frames \(4\)"):
        cache_config({"window_frames": 4, "sink_frames": 4})


def test_load_options_and_keywords_are_one_call():
    """`load_world_model(path, LoadOptions(...))` is `load_world_model(path, **same keywords)`; the keywords lay over
    a given LoadOptions, and an unknown one is refused as an unknown keyword argument always was."""
    assert LoadOptions.of(None, fp8=True, lora=[("a.pt", 1.0)]) == LoadOptions(fp8=True, lora=(("a.pt", 1.0),))
    assert LoadOptions.of(LoadOptions(fp8=True), device="cpu") == LoadOptions(fp8=True, device="cpu")
    with pytest.raises(TypeError, match="fp9"):
        load_world_model("bundled", fp9=True)
    by_options = load_world_model("bundled", LoadOptions(device="cpu", dtype="fp32"))
    by_keywords = load_world_model("bundled", device="cpu", dtype="fp32")
    assert by_options.describe() == by_keywords.describe()
    for a, b in zip(
        by_options.transformer.state_dict().values(), by_keywords.transformer.state_dict().values(), strict=True
    ):
        assert a.equal(b)
    assert {f.name for f in dataclasses.fields(LoadOptions)} >= {"vae_path", "gpu_memory", "lora", "cuda_graphs"}
