"""One widgets → configs path (issue #43, `inferix_core.workflow.settings`): the loader node, the CLI flags and
`inferix play` reading a workflow build equal LoadOptions (and play the KV Cache Config node's KVCacheConfig) from
equal settings."""

from __future__ import annotations

import json

import pytest

from inferix_core import cli
from inferix_core.commands import play as play_cmd
from inferix_core.commands.memory_args import load_options_from_args
from inferix_core.models.options import LoadOptions


class LoadedError(Exception):
    """Raised by the stand-in loader once it has the options: nothing is loaded."""


def capture(calls: list):
    def load(path, options):
        calls.append((path, options))
        raise LoadedError

    return load


def node_options(node_classes, monkeypatch, memory_widgets: dict | None, **loader) -> tuple[str, LoadOptions]:
    from inferix_core.models import registry

    calls = []
    monkeypatch.setattr(registry, "load_world_model", capture(calls))
    memory = None
    if memory_widgets is not None:
        (memory,) = node_classes["InferixMemorySettings"]().EXECUTE_NORMALIZED(**memory_widgets)["result"]
    with pytest.raises(LoadedError):
        node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**loader, memory=memory)
    (call,) = calls
    return call


LOADER = dict(model="bundled", vae="bundled", preview_decoder="none", text_encoder="bundled", dtype="bf16",
              attention="auto", device="cpu", fp8=True, compile=True, family="self_forcing", weights="ema",
              cuda_graphs=True)  # fmt: skip
MEMORY = dict(gpu_memory_gb=12.0, resident_blocks=-1, fp8_weights=True, text_encoder="offload")
FLAGS = ["--dtype", "bf16", "--device", "cpu", "--fp8", "--compile", "--cuda-graphs", "--family", "self_forcing",
         "--weights", "ema", "--gpu-memory", "12GB", "--fp8-weights", "--text-encoder-placement", "offload"]  # fmt: skip


def test_the_node_and_the_cli_give_equal_load_options(node_classes, monkeypatch):
    path, from_node = node_options(node_classes, monkeypatch, MEMORY, **LOADER)
    args = cli.build_parser().parse_args(["play", "bundled", *FLAGS])
    assert load_options_from_args(args) == from_node
    want = LoadOptions(family="self_forcing", weights="ema", dtype="bf16", device="cpu", fp8=True, compile=True,
                       cuda_graphs=True, gpu_memory=12 * 2**30, fp8_weights=True, text_encoder_placement="offload")  # fmt: skip
    assert from_node == want
    calls = []  # `inferix play bundled FLAGS` itself
    monkeypatch.setattr(play_cmd, "load_world_model", capture(calls))
    with pytest.raises(LoadedError):
        play_cmd.load_setup(args)
    assert calls == [(path, from_node)]
    # the defaults: an unconnected memory input and no flags
    defaults = dict(dtype="auto", device="auto", fp8=False, compile=False, cuda_graphs=False, family="auto")
    _, plain = node_options(node_classes, monkeypatch, None, **{**LOADER, **defaults, "weights": "auto"})
    assert plain == load_options_from_args(cli.build_parser().parse_args(["play", "bundled"])) == LoadOptions()


def test_play_and_the_nodes_build_the_same_configs(node_classes, models_dir, tmp_path, monkeypatch):
    """A workflow's Load World Model, Memory Settings and KV Cache Config widgets give `inferix play` the configs
    the nodes build from them (play reads the Memory Settings node too)."""
    loader = dict(model="causal_wan_tiny.safetensors", vae="wan_vae_tiny.safetensors", preview_decoder="none",
                  text_encoder="bundled", dtype="fp32", attention="sdpa", device="cpu", fp8=True, compile=False,
                  family="self_forcing", weights="ema", cuda_graphs=True)  # fmt: skip
    memory = dict(gpu_memory_gb=8.0, resident_blocks=3, fp8_weights=False, text_encoder="cpu")
    kv = dict(window_frames=12, sink_frames=3, page_frames=2, offload="auto", gpu_budget_gb=1.5, quantization="int8")
    graph = {
        "1": {"class_type": "InferixLoadWorldModel", "inputs": {**loader, "memory": ["2", 0]}},
        "2": {"class_type": "InferixMemorySettings", "inputs": memory},
        "3": {"class_type": "InferixKVCacheConfig", "inputs": kv},
        "4": {"class_type": "InferixBlockDenoise", "inputs": {"world_model": ["1", 0], "kv_cache": ["3", 0],
              "prompt": "a road", "width": 96, "height": 64, "seed": 1}},
    }  # fmt: skip
    workflow = tmp_path / "wf.json"
    workflow.write_text(json.dumps(graph))
    node_call = node_options(node_classes, monkeypatch, memory, **loader)
    (node_cache,) = node_classes["InferixKVCacheConfig"]().EXECUTE_NORMALIZED(**kv)["result"]

    calls, setups = [], []

    def load(path, options):
        calls.append((path, options))
        return "wm"

    monkeypatch.setattr(play_cmd, "load_world_model", load)
    setups.append(play_cmd.load_setup(cli.build_parser().parse_args(["play", str(workflow)])))
    assert calls == [node_call] and setups[0].cache == node_cache
    assert node_call[1].resident_blocks == 3 and node_call[1].text_encoder_placement == "cpu"
    assert node_cache.quantization == "int8" and node_cache.gpu_budget_bytes == int(1.5 * 2**30)
