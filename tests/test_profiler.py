"""Profiler on a sleep-based fake workload with known timings: FPS, first frame, latency, JSON, HTML."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from inferix_core.errors import ConfigError
from inferix_core.profiling import NullProfiler, Profiler, ProfileReport
from inferix_core.profiling.html_report import render_html

NUM_BLOCKS, FRAMES_PER_BLOCK = 5, 12
TEXT_S, STEP_S, DECODE_S = 0.03, 0.02, 0.01
NUM_STEPS = 3


def fake_run(profiler: NullProfiler) -> tuple[float, float]:
    """Run the fake loop; returns independently measured (seconds to last block end, seconds to first frame)."""
    t0 = time.perf_counter()
    profiler.on_run_start({"model": "fake", "steps": NUM_STEPS})
    with profiler.stage("text_encode"):
        time.sleep(TEXT_S)
    first_frame = None
    for block in range(NUM_BLOCKS):
        profiler.on_block_start(block)
        for _ in range(NUM_STEPS):
            with profiler.stage("denoise_step"):
                time.sleep(STEP_S)
        with profiler.stage("context"):
            time.sleep(STEP_S)
        with profiler.stage("decode"):
            time.sleep(DECODE_S * (2 if block == 2 else 1))  # one slow block for the latency spread
        if first_frame is None:
            profiler.on_first_frame()
            first_frame = time.perf_counter() - t0
        profiler.record_kv_cache({"used_frames": min(3 * (block + 1), 9), "bytes": 1024 * (block + 1)})
        profiler.on_block_end(block, FRAMES_PER_BLOCK)
    t_last = time.perf_counter() - t0
    profiler.on_run_end()
    return t_last, first_frame


def test_fps_matches_independent_measurement(tmp_path: Path) -> None:
    profiler = Profiler("cpu")
    seconds, first_frame = fake_run(profiler)
    report = profiler.report()
    frames = NUM_BLOCKS * FRAMES_PER_BLOCK
    assert report.num_frames == frames
    # The test's clock brackets the profiler's (started just before on_run_start, read just after the last
    # on_block_end), so the two differ only by a few hook calls: 2 % covers that with a wide margin.
    assert report.fps == pytest.approx(frames / seconds, rel=0.02)
    assert report.time_to_first_frame_s == pytest.approx(first_frame, abs=0.005)
    block_s = NUM_STEPS * STEP_S + STEP_S + DECODE_S
    # sleep() overshoots by scheduler latency, never undershoots: lower bounds exact, upper bounds generous
    assert block_s <= report.block_latency_s["median"] < block_s + 0.03
    assert report.block_latency_s["max"] >= block_s + DECODE_S
    assert report.block_latency_s["median"] <= report.block_latency_s["p90"] <= report.block_latency_s["max"]
    totals = report.stage_totals
    assert totals["denoise_step"]["count"] == NUM_BLOCKS * NUM_STEPS and totals["text_encode"]["count"] == 1
    assert totals["denoise_step"]["wall_s"] >= NUM_BLOCKS * NUM_STEPS * STEP_S
    assert {s.block_index for s in report.stages if s.name == "decode"} == set(range(NUM_BLOCKS))
    assert [s.block_index for s in report.stages if s.name == "text_encode"] == [None]
    assert report.steady_fps == pytest.approx(
        (frames - FRAMES_PER_BLOCK)
        / (report.blocks[-1].start_s + report.blocks[-1].wall_s - report.blocks[0].wall_s - report.blocks[0].start_s)
    )
    assert report.peak_rss_bytes > 0 and all(m.rss_bytes > 0 for m in report.memory)
    assert report.peak_gpu_bytes is None and all(b.gpu_s is None for b in report.blocks)
    assert report.kv_cache[-1].stats == {"used_frames": 9.0, "bytes": 5120.0} and report.kv_cache[-1].block_index == 4


def test_json_round_trip_and_html() -> None:
    profiler = Profiler("cpu")
    fake_run(profiler)
    report = profiler.report()
    text = report.to_json()
    assert ProfileReport.from_json(text) == report
    assert json.loads(text)["meta"] == {"model": "fake", "steps": NUM_STEPS}
    page = render_html(report)
    assert page.count("<svg") == 2 and 'id="block-times"' in page and 'id="memory"' in page
    assert page.count('class="bar"') == NUM_BLOCKS and "<polyline" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    assert "denoise_step" in page and "used_frames" in page


def test_torch_trace_export(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    profiler = Profiler("cpu", trace_path=trace)
    fake_run(profiler)
    report = profiler.report()
    assert report.trace_path == str(trace)
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"denoise_step", "decode"} <= names


def test_hooks_need_run_start_and_null_profiler_is_free() -> None:
    with pytest.raises(ConfigError, match="on_run_start"):
        Profiler("cpu").on_block_start(0)
    fake_run(NullProfiler())  # same calls, nothing recorded, no errors
