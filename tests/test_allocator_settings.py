"""A run planned against a GPU budget switches CUDA's allocator to expandable segments, unless one was chosen.

The 8 GB plan of the 1.3B model + Wan VAE ran out on the H200 with 0.36 GiB reserved but unallocated
(docs/performance.md): fragmentation, which expandable segments avoid. These tests run on the CPU: before
CUDA starts, the switch is the environment variable the allocator reads when it starts.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

from inferix_core.clients import benchmark
from inferix_core.tensors import prefer_expandable_segments

VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@pytest.fixture
def clean_env(monkeypatch):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


def test_a_budget_on_cuda_sets_expandable_segments_and_says_so(clean_env, caplog):
    with caplog.at_level(logging.INFO, logger="inferix_core.tensors"):
        assert prefer_expandable_segments("cuda") is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "expandable segments" in caplog.text


@pytest.mark.parametrize("name", VARS)
def test_a_configuration_already_set_is_kept(clean_env, name, caplog):
    clean_env.setenv(name, "backend:cudaMallocAsync")  # what ComfyUI may choose
    with caplog.at_level(logging.INFO, logger="inferix_core.tensors"):
        assert prefer_expandable_segments(torch.device("cuda", 0)) is False
    assert os.environ[name] == "backend:cudaMallocAsync"
    assert all(os.environ.get(v) in (None, "backend:cudaMallocAsync") for v in VARS)
    assert "keeping the allocator configuration" in caplog.text


def test_cpu_runs_leave_the_allocator_alone(clean_env):
    assert prefer_expandable_segments("cpu") is False
    assert not any(os.environ.get(v) for v in VARS)


def test_an_initialised_cuda_gets_the_setting_at_run_time(clean_env):
    seen = []
    clean_env.setattr(torch.cuda, "is_initialized", lambda: True)
    clean_env.setattr(torch._C, "_accelerator_setAllocatorSettings", seen.append, raising=False)
    assert prefer_expandable_segments("cuda") is True
    assert seen == ["expandable_segments:True"]


def test_the_bench_switches_only_for_an_emulated_card(clean_env):
    calls = []
    clean_env.setattr(benchmark, "prefer_expandable_segments", calls.append)
    clean_env.setattr(benchmark, "build_engine", lambda cfg: (_ for _ in ()).throw(RuntimeError("stop")))
    for gb in (None, 8.0):
        cfg = benchmark.BenchConfig(preset="tiny", device="cpu", dtype="fp32", gpu_memory_gb=gb)
        with pytest.raises(RuntimeError, match="stop"):
            benchmark.run_engine_benchmark(cfg)
    assert calls == [torch.device("cpu")]
