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


def test_bench_tiny_5b_cpu_uses_the_preset_blocks_and_the_wan22_vae(tmp_path):
    """The Wan 2.2 path: 48-channel transformer, the preset's own run length and 2-frame blocks, Wan 2.2 VAE decode."""
    from inferix_core.benchmark import PRESETS

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
