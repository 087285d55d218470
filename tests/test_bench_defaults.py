"""The benchmark measures what users run: its defaults equal load_world_model's on CUDA (issue #19).

Checked on the CPU: the loader's signature defaults, the family the protocol's model belongs to
(Self-Forcing's Wan 2.1 1.3B), and the Wan VAE decode options the loader gives a VAE on a CUDA device
(its file loading stubbed, since there is no GPU here) against `BenchConfig()`, the `inferix bench` flags
left at their defaults, and what the benchmark builds.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.clients.benchmark import DTYPES, BenchConfig, bench_sampling, bench_vae_decode_options
from inferix_core.commands import bench as bench_command
from inferix_core.models import registry
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions

CUDA = torch.device("cuda")
SAME_NAME = ("attention", "fp8", "fp8_weights", "compile", "cuda_graphs", "resident_blocks")


def _cli_defaults() -> BenchConfig:
    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers())
    return bench_command.bench_config(parser.parse_args(["bench"]))


def test_bench_config_defaults_are_the_loaders():
    loader = registry.LoadOptions()  # the loader's defaults
    for cfg in (BenchConfig(), _cli_defaults()):
        for name in SAME_NAME:
            assert getattr(cfg, name) == getattr(loader, name), name
        assert DTYPES[cfg.dtype] == registry.resolve_dtype(loader.dtype, CUDA)
        assert cfg.device == "cuda"
        family = registry.FAMILIES["self_forcing"]  # the protocol's model: Self-Forcing's Wan 2.1 T2V 1.3B
        assert bench_sampling(cfg) == family.sampling
        assert KVCacheConfig(window_frames=cfg.window_frames, sink_frames=cfg.sink_frames) == family.cache
    assert _cli_defaults() == BenchConfig()


def test_the_wan_vae_decodes_with_the_loaders_cuda_options(monkeypatch):
    """What `load_vae` and `load_world_model(compile=...)` give a Wan VAE on CUDA is what the benchmark uses."""
    monkeypatch.setattr(
        WanVAE, "from_file", classmethod(lambda cls, path, device=None, dtype=None: WanVAE(WanVAEConfig(dim=4)))
    )
    for compile in (False, True):
        vae = registry.load_vae("wan_2.1_vae.safetensors", CUDA, torch.bfloat16)
        world = SimpleNamespace(vae=vae, device=CUDA, transformer=CausalWanTransformer(WanConfig(
            dim=32, ffn_dim=64, freq_dim=16, text_dim=16, text_len=8, num_heads=2, num_layers=1)))  # fmt: skip
        registry.maybe_compile(world, compile)
        loader = world.vae.decode_options
        assert loader == VAEDecodeOptions.fast(compile=compile)
        assert bench_vae_decode_options(BenchConfig(compile=compile, vae_decode=True)) == loader
    assert registry.load_vae("x", torch.device("cpu"), torch.float32).decode_options is None  # CPU: reference path
    assert bench_vae_decode_options(BenchConfig(device="cpu")) is None
    assert bench_vae_decode_options(BenchConfig(vae_fast=False)) is None  # --vae-reference / the vaeref variant
    assert bench_vae_decode_options(BenchConfig(vae_fast=True, compile=True)) == VAEDecodeOptions.fast()


def test_the_wan_vae_streams_with_the_loaders_cuda_slicing(monkeypatch):
    """On CUDA the loader's Wan 2.1 VAE decodes one latent frame per call with the previous state released, and so
    do the benchmark's decoder and the planner's estimate; on the CPU and for the Wan 2.2 VAE, whole blocks."""
    from inferix_core.clients.benchmark import bench_vae_memory
    from inferix_core.vae import Wan22VAE, Wan22VAEConfig
    from inferix_core.vae.cost import estimated_memory
    from inferix_core.vae.memory import CUDA_STREAM_SLICING, DecodeSlicing

    built = {"wan": lambda: WanVAE(WanVAEConfig(dim=4)), "wan22": lambda: Wan22VAE(Wan22VAEConfig(dim=2, dec_dim=4))}
    kind = "wan"
    monkeypatch.setattr(WanVAE, "from_file", classmethod(lambda cls, path, device=None, dtype=None: built[kind]()))
    assert DecodeSlicing(1, release_previous_state=True) == CUDA_STREAM_SLICING
    assert registry.load_vae("x", CUDA, torch.bfloat16).stream_slicing == CUDA_STREAM_SLICING
    assert registry.load_vae("x", torch.device("cpu"), torch.float32).stream_slicing == DecodeSlicing()
    kind = "wan22"
    wan22 = registry.load_vae("x", CUDA, torch.bfloat16)
    assert wan22.stream_slicing == Wan22VAE(Wan22VAEConfig(dim=2, dec_dim=4)).stream_slicing  # its own
    # the benchmark's decoder and plan (BenchConfig's device is "cuda"; only its type is read)
    cfg = BenchConfig(preset="tiny", vae_decode=True)
    assert registry.loader_vae_stream_slicing(WanVAE(WanVAEConfig(dim=4)), "cuda") == CUDA_STREAM_SLICING
    assert bench_vae_memory(cfg).default == CUDA_STREAM_SLICING
    assert bench_vae_memory(BenchConfig(preset="tiny", vae_decode=True, vae_slicing="whole")).default == DecodeSlicing()
    assert estimated_memory(60, 104, 1, 2).default == CUDA_STREAM_SLICING
    assert estimated_memory(60, 104, 1, 2, cuda=False).default == DecodeSlicing()


def test_bench_cuda_graphs_flag_on_cpu_is_refused_and_reported(tmp_path, capsys):
    """`inferix bench --cuda-graphs` on the CPU runs eagerly and says so in the table and the JSON."""
    import json

    from inferix_core.cli import main

    out = tmp_path / "bench.json"
    args = ["bench", "--preset", "tiny", "--device", "cpu", "--dtype", "fp32", "--latent-frames", "6"]
    assert main([*args, "--warmup", "0", "--repeats", "1", "--cuda-graphs", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["config"]["cuda_graphs"] is True and result["cuda_graphs"] is None
    assert result["attention_effective"] == "sdpa"
    assert "on, refused" in capsys.readouterr().out


def test_bench_variants_run_each_lever_and_name_unknown_parts(tmp_path, capsys):
    import json

    import pytest

    from inferix_core.cli import main
    from inferix_core.clients.benchmark import variant_options
    from inferix_core.errors import ConfigError

    assert variant_options("compile+graphs") == {"compile": True, "cuda_graphs": True}
    with pytest.raises(ConfigError, match="unknown variant part 'graph'"):
        variant_options("compile+graph")
    out = tmp_path / "variants.json"
    args = ["bench", "--preset", "tiny", "--device", "cpu", "--dtype", "fp32", "--latent-frames", "6"]
    assert main([*args, "--warmup", "0", "--repeats", "1", "--variants", "eager,graphs", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["variants"]
    assert [r["variant"] for r in rows] == ["eager", "graphs"]
    assert rows[0]["config"]["cuda_graphs"] is False and rows[1]["config"]["cuda_graphs"] is True
    text = capsys.readouterr().out
    assert "graphs" in text and "on, refused" in text and "x of eager" in text


def test_decode_slicing_variants_reach_the_decoder_and_default_to_the_loaders():
    """`vaewhole` / `vaerelease` / `vaeframe` set the Wan VAE's slicing; by default it decodes as the loader's VAE
    does on that device (the CPU here: whole blocks); a variant without the Wan VAE is refused."""
    import pytest

    from inferix_core.clients.benchmark import run_engine_benchmark, variant_options
    from inferix_core.errors import ConfigError

    assert BenchConfig().vae_slicing is None and _cli_defaults().vae_slicing is None
    seen = {}
    for variant in ("vaefast", "vaewhole", "vaerelease", "vaeframe"):
        cfg = BenchConfig(preset="tiny", device="cpu", dtype="fp32", latent_frames=6, warmup=0, repeats=1,
                          vae_decode=True, **variant_options(variant))  # fmt: skip
        seen[variant] = run_engine_benchmark(cfg)["decode_slicing"]
    assert seen == {
        "vaefast": "whole block per decoder call",
        "vaewhole": "whole block per decoder call",
        "vaerelease": "whole block per decoder call, previous state released",
        "vaeframe": "1 latent frame per call, previous state released",
    }
    # compare_reference.py skips the diffusion row of a decode-only lever: the table says which those are
    from inferix_core.clients.benchmark import VARIANT_PARTS, decoder_only

    assert [v for v in VARIANT_PARTS if decoder_only(v)] == [
        "vaefast",
        "vaeref",
        "taehv",
        "vaewhole",
        "vaerelease",
        "vaeframe",
    ]
    assert decoder_only("compile+vaeframe") and not decoder_only("compile+graphs")
    with pytest.raises(ConfigError, match="needs the Wan VAE"):
        run_engine_benchmark(BenchConfig(preset="tiny", device="cpu", dtype="fp32", **variant_options("vaeframe")))


def test_the_last_context_pass_is_skipped_as_users_get_it(monkeypatch):
    """generate_video writes the last block's K/V only for a kept world; the benchmark runs the same request."""
    from inferix_core.api import generate_video
    from inferix_core.clients.benchmark import run_engine_benchmark
    from inferix_core.pipeline import BlockDiffusionPipeline

    seen = []
    real = BlockDiffusionPipeline.check_request  # every driver of a request opens it through here (pipeline/loop.py)

    def spy(self, request):
        seen.append(request.final_context_pass)
        return real(self, request)

    monkeypatch.setattr(BlockDiffusionPipeline, "check_request", spy)
    world = registry.load_world_model("bundled", device="cpu")
    for keep in (False, True):
        generate_video(world, "", width=96, height=96, num_blocks=1, decode=False, keep_world_state=keep)
    run_engine_benchmark(BenchConfig(preset="tiny", device="cpu", dtype="fp32", latent_frames=6, warmup=0, repeats=1))
    assert seen == [False, True, False]
