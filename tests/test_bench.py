"""`inferix bench` smoke run on CPU, so the GPU benchmark protocol does not rot."""

from __future__ import annotations

import json

from inferix_core.cli import main


def test_bench_tiny_cpu(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(
        [
            "bench",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--latent-frames",
            "6",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--vae-decode",
            "--overlap-decode",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["pixel_frames"] == 21 and result["fps"] > 0
    assert len(result["median_block_s"]) == 2 and all(t > 0 for t in result["median_block_s"])
    assert "FPS (pixel frames)" in capsys.readouterr().out


def test_bench_block_swap_cpu(tmp_path, capsys):
    """--resident-blocks runs the swapped model (tiny preset: 2 blocks, 1 resident) and reports it."""
    out = tmp_path / "bench.json"
    args = ["bench", "--preset", "tiny", "--device", "cpu", "--dtype", "fp32", "--latent-frames", "6"]
    args += ["--warmup", "0", "--repeats", "1", "--resident-blocks", "1", "--json", str(out)]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["resident_blocks"] == 1 and result["planned_gib"] > 0
    assert "1 of 2 blocks resident" in capsys.readouterr().out


def test_planned_resident_blocks_fit_the_card():
    from inferix_core.cache import KVCacheConfig
    from inferix_core.cache.planner import allocator_headroom_bytes
    from inferix_core.clients.benchmark import BenchConfig, bench_memory_plan, planned_resident_blocks

    cache = KVCacheConfig(window_frames=6)
    cfg = BenchConfig(preset="wan-14b", window_frames=6, gpu_memory_gb=24)
    usable = 24 * 2**30 - allocator_headroom_bytes(24 * 2**30)  # the caching allocator's share stays unplanned
    resident = planned_resident_blocks(cfg, cache)
    assert 0 < resident < 40
    assert bench_memory_plan(cfg, cache, resident).total_bytes <= usable
    assert bench_memory_plan(cfg, cache, resident + 1).total_bytes > usable


def test_bench_14b_preset_is_wan_14b_sampled_as_krea():
    """The 14b preset builds (on the meta device: no memory) with Wan 2.1 14B dims and Krea's sampling."""
    from inferix_core.clients.benchmark import PRESETS, BenchConfig, build_engine
    from inferix_core.models.registry import get_family

    cfg = PRESETS["14b"]["config"]
    assert (cfg.dim, cfg.num_heads, cfg.num_layers, cfg.ffn_dim) == (5120, 40, 40, 13824)
    assert 13.5e9 < cfg.num_parameters() < 14.5e9
    pipe, context = build_engine(BenchConfig(preset="14b", device="meta"))
    krea = get_family("krea").sampling
    assert pipe.sampling.denoising_steps == krea.denoising_steps
    assert pipe.sampling.kv_recompute_frames == krea.kv_recompute_frames == 3
    assert context.shape == (1, 512, 4096) and pipe.model.config == cfg


def test_bench_tiny_5b_cpu_uses_the_preset_blocks_and_the_wan22_vae(tmp_path):
    """The Wan 2.2 path: 48-channel transformer, the preset's own run length and 2-frame blocks, Wan 2.2 VAE decode."""
    from inferix_core.clients.benchmark import PRESETS

    out = tmp_path / "bench.json"
    args = ["bench", "--preset", "tiny-5b", "--device", "cpu", "--dtype", "fp32", "--warmup", "0", "--repeats", "1"]
    assert main([*args, "--vae-decode", "--json", str(out)]) == 0
    result, preset = json.loads(out.read_text()), PRESETS["tiny-5b"]
    assert result["config"]["block_frames"] == preset["block_frames"]
    assert result["pixel_frames"] == 1 + 4 * (preset["latent_frames"] - 1)
    assert len(result["median_block_s"]) == preset["latent_frames"] // preset["block_frames"]


def test_bench_unknown_preset_is_one_line(capsys):
    assert main(["bench", "--preset", "wan-9b", "--device", "cpu"]) == 2
    assert "unknown preset 'wan-9b'" in capsys.readouterr().err
