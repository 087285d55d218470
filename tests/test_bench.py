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
