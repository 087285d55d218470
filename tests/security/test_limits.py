"""Bounded runs and honest outputs (issue #20, items 5 and 8).

`seconds` obeys the 1,000-block cap and refuses non-finite values; with no GPU budget the planner
budgets the memory the machine has (free CUDA memory, else host RAM), counts the decoded frames kept in
host memory and refuses before allocating, naming the cheapest fix; `run` lists only its own outputs;
`--json OUT` never overwrites; `--vae` with the bundled model is an error, not ignored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from inferix_core.api import check_plan, generate_video, plan_run
from inferix_core.cache import plan_costs
from inferix_core.engine.schedules import seconds_to_blocks
from inferix_core.errors import CacheBudgetError, ConfigError
from inferix_core.models.registry import load_world_model

REPO = Path(__file__).resolve().parents[2]
MiB = 2**20


@pytest.fixture(scope="module")
def bundled():
    return load_world_model("bundled", device="cpu")


@pytest.fixture
def no_generation(monkeypatch):
    """A run that gets past the checks fails at once instead of generating thousands of blocks."""
    import inferix_core.api as api

    def refuse(*args, **kwargs):
        raise AssertionError(f"generation started with num_blocks={kwargs.get('num_blocks')}: the cap was bypassed")

    monkeypatch.setattr(api, "generate_video", refuse)


@pytest.mark.parametrize("seconds", [math.inf, math.nan, -1.0, 1e308])
def test_block_denoise_seconds_refuses_non_finite_and_beyond_the_cap(bundled, no_generation, seconds):
    from inferix_nodes.block_denoise import MAX_BLOCKS, InferixBlockDenoise

    w, h = bundled.default_size
    if not math.isfinite(seconds) or seconds < 0:  # refused when the node runs (one message, issue #52)
        with pytest.raises(ConfigError, match="seconds must be 0"):
            InferixBlockDenoise.execute(bundled, "", 1, seconds, w, h, "", 0)
        return
    with pytest.raises(ConfigError, match=f"more than the {MAX_BLOCKS}-block"):
        InferixBlockDenoise.execute(bundled, "", 1, seconds, w, h, "", 0)


def test_seconds_just_over_the_cap_is_refused_and_at_the_cap_accepted(bundled, no_generation):
    from inferix_nodes.block_denoise import MAX_BLOCKS, InferixBlockDenoise

    from inferix_core.engine.schedules import block_timing

    at_cap = block_timing(bundled).video_seconds(MAX_BLOCKS)  # what 1000 blocks decode to
    assert seconds_to_blocks(bundled, at_cap) == MAX_BLOCKS
    w, h = bundled.default_size
    with pytest.raises(ConfigError, match="block"):
        InferixBlockDenoise.execute(bundled, "", 1, at_cap + 0.01, w, h, "", 0)


@pytest.mark.parametrize("seconds", [math.inf, math.nan])
def test_core_seconds_to_blocks_refuses_non_finite(bundled, seconds):
    with pytest.raises(ConfigError):
        seconds_to_blocks(bundled, seconds)


def video_frames(world, num_blocks: int) -> int:
    w, h = world.default_size
    return generate_video(world, "", num_blocks=num_blocks, width=w, height=h, seed=0).frames.shape[0]


def test_planner_counts_the_decoded_frames_kept_in_host_memory(bundled):
    w, h = bundled.default_size
    plan = plan_run(bundled, None, w, h, num_blocks=3)
    assert plan.host is not None
    assert plan.host.num_frames == video_frames(bundled, 3)  # the frames generate_video really returns
    assert plan.host.frame_bytes == w * h * 3  # uint8 RGB


def test_no_budget_means_the_machine_s_memory_and_a_refusal_naming_the_fix(bundled):
    w, h = bundled.default_size
    small = 40 * MiB
    plan = plan_run(bundled, None, w, h, num_blocks=1000, available_bytes=small)
    with pytest.raises(CacheBudgetError) as info:
        check_plan(plan)  # before anything is allocated
    message = str(info.value)
    fit = plan.host.max_blocks
    assert f"at most {fit} blocks" in message and "host memory" in message and 0 < fit < 1000
    assert check_plan(plan_run(bundled, None, w, h, num_blocks=fit, available_bytes=small)) is not None
    with pytest.raises(CacheBudgetError):
        check_plan(plan_run(bundled, None, w, h, num_blocks=fit + 1, available_bytes=small))


def test_default_host_budget_is_the_available_ram(bundled, monkeypatch):
    monkeypatch.setattr(plan_costs, "host_available_bytes", lambda: 30 * MiB)
    w, h = bundled.default_size
    with pytest.raises(CacheBudgetError, match="host memory"):
        check_plan(plan_run(bundled, None, w, h, num_blocks=1000))


def test_cuda_default_budget_is_the_free_device_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * 2**30, 24 * 2**30))
    assert plan_costs.available_memory_bytes("cuda:0") == (3 * 2**30, "free memory of cuda:0")
    assert plan_costs.available_memory_bytes("cpu")[1] == "available host RAM"


def test_run_lists_only_its_own_outputs(tmp_path, capsys):
    from inferix_core.cli import main

    out = tmp_path / "out"
    (out / "inferix").mkdir(parents=True)
    (out / "inferix" / "someone_else_00001.mp4").write_bytes(b"other run")
    wf = str(REPO / "workflows" / "api" / "quickstart_api.json")
    assert main(["run", wf, "--output-dir", str(out), "--no-progress", "--set", "3.num_blocks=1"]) == 0
    printed = capsys.readouterr().out.split("outputs:")[1].split()
    assert [Path(p).name for p in printed] == ["quickstart_00001.mp4"], printed
    assert any((out / "inferix_temp").rglob("*.jpg"))  # the previews exist, they are just not outputs


def test_lvbench_json_never_overwrites(tmp_path, capsys):
    from inferix_core.cli import main
    from inferix_core.sinks import Mp4Sink

    rng = torch.Generator().manual_seed(0)
    with Mp4Sink(tmp_path / "v.mp4", fps=16) as sink:
        sink.write((torch.rand(8, 32, 32, 3, generator=rng) * 255).to(torch.uint8), 0)
    out = tmp_path / "scores.json"
    out.write_text("the user's earlier scores")
    args = ["lvbench", str(tmp_path / "v.mp4"), "--metrics", "clarity", "--chunks", "2", "--json", str(out)]
    assert main(args) == 0
    assert out.read_text() == "the user's earlier scores"
    new = [p for p in tmp_path.glob("scores*.json") if p != out]
    assert len(new) == 1 and "videos" in json.loads(new[0].read_text())
    assert main([*args, "--force"]) == 0 and "videos" in json.loads(out.read_text())


def test_bench_json_never_overwrites(tmp_path, monkeypatch, capsys):
    from inferix_core.cli import main
    from inferix_core.clients import benchmark, benchmark_report

    monkeypatch.setattr(benchmark, "run_engine_benchmark", lambda cfg: {"rows": [1]})
    monkeypatch.setattr(benchmark_report, "format_table", lambda result: "table")
    out = tmp_path / "bench.json"
    out.write_text("earlier")
    assert main(["bench", "--device", "cpu", "--json", str(out)]) == 0
    assert out.read_text() == "earlier" and len(list(tmp_path.glob("bench*.json"))) == 2


@pytest.mark.parametrize("flag", ["vae_path", "text_encoder_path", "preview_decoder_path"])
def test_vae_with_the_bundled_model_is_an_error_not_ignored(tmp_path, flag):
    with pytest.raises(ConfigError, match="bundled model brings its own"):
        load_world_model("bundled", device="cpu", **{flag: str(tmp_path / "wan_2.1_vae.safetensors")})
