"""The profiler's CUDA-event path on a GPU: stage GPU times, FPS of a real generate_video run."""

from __future__ import annotations

import time

import pytest
import torch

from inferix_core.profiling import Profiler

pytestmark = pytest.mark.cuda
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


def _spin_cycles(seconds: float) -> int:
    """GPU clock cycles that `torch.cuda._sleep` needs for about `seconds` (measured, not assumed)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return int(cycles * seconds / (start.elapsed_time(end) / 1000))


def test_stage_gpu_time_is_the_kernels_time_not_the_launch_time() -> None:
    """A stage that only launches GPU work returns at once on the host; its gpu_s is the work's length."""
    work_s = 0.05
    cycles = _spin_cycles(work_s)
    profiler = Profiler("cuda")
    profiler.on_run_start({"model": "spin"})
    measured, host = [], []
    for block in range(3):
        profiler.on_block_start(block)
        reference = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        with profiler.stage("denoise_step"):
            reference[0].record()
            torch.cuda._sleep(cycles)
            reference[1].record()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        profiler.on_block_end(block, 4)
        measured.append(reference[0].elapsed_time(reference[1]) / 1000)
    profiler.on_run_end()
    report = profiler.report()
    stages = sorted((s for s in report.stages if s.name == "denoise_step"), key=lambda s: s.block_index)
    for stage, gpu_s, host_s in zip(stages, measured, host, strict=True):
        assert stage.gpu_s == pytest.approx(gpu_s, rel=0.05, abs=1e-3)
        assert stage.gpu_s > 10 * host_s  # the host only queued the work; the event pair timed the work
    assert all(b.gpu_s is not None and b.gpu_s >= g for b, g in zip(report.blocks, measured, strict=True))
    assert report.peak_gpu_bytes is not None


def test_generate_video_fps_on_gpu_matches_an_independent_clock() -> None:
    from inferix_core.api import generate_video
    from inferix_core.models.registry import load_world_model

    model = load_world_model("bundled", device="cuda")
    width, height = model.default_size
    generate_video(model, num_blocks=1, width=width, height=height, seed=0)  # warm-up (cuDNN, allocator)
    profiler = Profiler("cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = generate_video(model, num_blocks=6, width=width, height=height, seed=1, profiler=profiler)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    report = profiler.report()
    frames = result.frames.shape[0]
    assert report.num_frames == frames > 0
    # the test's clock brackets the profiler's run (which starts after argument checks and model
    # preparation): the profiler's FPS is at least the bracketing one and close to it
    assert frames / seconds <= report.fps * 1.001
    assert report.fps == pytest.approx(frames / seconds, rel=0.25)
    assert report.time_to_first_frame_s is not None and 0 < report.time_to_first_frame_s < report.wall_s
    assert all(b.gpu_s is not None and b.gpu_s > 0 for b in report.blocks)
    gpu_stages = [s for s in report.stages if s.gpu_s is not None]
    assert gpu_stages and all(s.gpu_s >= 0 for s in gpu_stages)
    assert report.peak_gpu_bytes and report.peak_gpu_bytes > 0
    assert torch.isfinite(torch.as_tensor(result.frames, dtype=torch.float32)).all()
