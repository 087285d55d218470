"""Sequence parallelism on 2 CPU processes (gloo) against the single-process engine.

Each test launches two ranks of tests/parallel/sp_worker.py with the environment torchrun would give
them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port) and compares what they saved here.
Fixtures are discovered by glob (`causal_wan_*.safetensors`), so a new fixture is covered with no change.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from tests.fixture_utils import fixture_header, self_forcing_runs
from tests.parallel.sp_worker import CACHE_KINDS
from tests.pipeline.test_parity import FixtureNoise, Recorder, build

WORKER = Path(__file__).with_name("sp_worker.py")
WORLD = 2
ATOL = 1e-4
FILES = self_forcing_runs()
# Two ranks start torch and run every fixture; on a busy 2-core machine that has taken over 120 s. The
# limit only has to catch a hang (a rank stuck in a collective), so it is generous, and scalable.
TIMEOUT_S = 600.0 * float(os.environ.get("INFERIX_TEST_TIMEOUT_SCALE", "1"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode: str, out_dir: Path, timeout: float = TIMEOUT_S) -> list[subprocess.CompletedProcess]:
    """Run WORLD ranks of the worker; return each rank's completed process (stdout+stderr captured)."""
    return launch_command([str(WORKER), mode, str(out_dir)], timeout)


def launch_command(
    args: list[str], timeout: float = TIMEOUT_S, cwd: Path | None = None
) -> list[subprocess.CompletedProcess]:
    """Run `python ARGS` as WORLD ranks with torchrun's environment; fails with their output on a hang."""
    port = _free_port()
    procs = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_WORLD_SIZE": str(WORLD),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    results = []
    deadline = time.monotonic() + timeout
    try:
        for rank, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                pytest.fail(
                    f"rank {rank} still running after {timeout:.0f} s (a hang, or a very busy machine: raise "
                    f"INFERIX_TEST_TIMEOUT_SCALE); its output:\n{out}"
                )
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return results


def _check_ok(results: list[subprocess.CompletedProcess]) -> None:
    for rank, r in enumerate(results):
        assert r.returncode == 0, f"rank {rank} failed (exit {r.returncode}):\n{r.stdout}"


@pytest.fixture(scope="module")
def rank_outputs(tmp_path_factory):
    """One launch of both ranks for every check except the failure test (starting ranks costs seconds)."""
    out_dir = tmp_path_factory.mktemp("sp_all")
    _check_ok(launch("all", out_dir))
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD)]


def single_process(path: Path, overrides: dict):
    info, t, model, sampling, cache_cfg = build(path)
    p = info["pipeline"]
    b, _f, _c, h, w = p["latent_shape"]
    pipe = BlockDiffusionPipeline(model, sampling, dataclasses.replace(cache_cfg, **overrides))
    rec = Recorder()
    req = GenerationRequest(
        num_blocks=p["num_blocks"],
        latent_height=h,
        latent_width=w,
        context=t["text_context"],
        batch_size=b,
        noise=FixtureNoise(t),
    )
    latents = pipe.generate(req, rec)
    return t, latents, torch.stack([rec.x0[k] for k in sorted(rec.x0)]), model.config.num_heads


@pytest.mark.parametrize("kind", list(CACHE_KINDS))
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_two_ranks_match_one_process(rank_outputs, path, kind):
    """Every step's x0 and the final latents on both ranks equal the 1-process run (and the reference); a
    fixture whose head count (its config's) does not divide by the ranks is refused on every rank, naming both."""
    heads = fixture_header(path)[0]["config"]["num_heads"]
    if heads % WORLD:
        for rank, out in enumerate(rank_outputs):
            message = out.get(f"{path.name}/refused", "")
            assert f"{heads} attention heads" in message and f"world size {WORLD}" in message, (rank, message)
        return
    t, latents, x0, heads = single_process(path, CACHE_KINDS[kind])
    key = f"{path.name}/{kind}"
    for rank, out in enumerate(rank_outputs):
        torch.testing.assert_close(
            out[key + "/latents"], latents, atol=ATOL, rtol=0, msg=lambda m, r=rank: f"rank {r}: {m}"
        )
        torch.testing.assert_close(out[key + "/x0"], x0, atol=ATOL, rtol=0, msg=lambda m, r=rank: f"rank {r}: {m}")
        assert int(out[key + "/cache_heads"]) == heads // WORLD  # each rank holds 1/N of the cache
    if kind != "int8":  # quantized caches are not exact against the fp32 reference (test_quant.py bounds them)
        torch.testing.assert_close(rank_outputs[0][key + "/latents"], t["output_latents"], atol=ATOL, rtol=0)
    torch.testing.assert_close(rank_outputs[0][key + "/latents"], rank_outputs[1][key + "/latents"], atol=0, rtol=0)


def test_all_to_all_helpers(rank_outputs):
    """seq_to_head / head_to_seq and the frame-interleaved exchange with padding are exact inverses."""
    for rank, out in enumerate(rank_outputs):
        for name in ("seq_to_head_ok", "head_to_seq_ok", "to_heads_ok", "to_tokens_ok", "gather_ok"):
            assert bool(out[name]), f"rank {rank}: {name}"


def test_heads_must_divide_by_world_size(rank_outputs):
    message = rank_outputs[0].get("heads_message", "")
    assert "3 attention heads" in message or "3 does not divide" in message, message


def test_error_on_one_rank_stops_all_with_its_message(tmp_path):
    """Rank 1 raises while rank 0 waits in a barrier: rank 0 stops at once, printing rank 1's error."""
    results = launch("fail", tmp_path)
    assert results[1].returncode != 0 and "rank one broke on purpose" in results[1].stdout
    assert results[0].returncode != 0, results[0].stdout
    assert "rank 1: ConfigError: rank one broke on purpose" in results[0].stdout, results[0].stdout


def test_full_sequence_with_mask_matches(rank_outputs):
    """Without a KV cache (explicit block-causal mask over all frames) the exchange covers k and v too."""
    for rank, out in enumerate(rank_outputs):
        assert float(out["masked_max_diff"]) < ATOL, f"rank {rank}: {float(out['masked_max_diff'])}"


def test_launcher_rank_zero_writes_and_prints(tmp_path):
    """`-m inferix_core.parallel bench ...`: both ranks run; only rank 0 prints the table and writes --json."""
    results = launch_command(
        [
            "-m",
            "inferix_core.parallel",
            "bench",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--latent-frames",
            "3",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--json",
            str(tmp_path / "bench.json"),
        ],
        cwd=tmp_path,
    )
    _check_ok(results)
    assert "FPS (pixel frames)" in results[0].stdout and "FPS" not in results[1].stdout, results[1].stdout
    assert (tmp_path / "bench.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # rank 1 wrote into its scratch folder


def test_rank_argv_redirects_outputs_of_other_ranks():
    from inferix_core.parallel.launch import rank_argv

    argv = ["run", "wf.json", "--output-dir", "out", "--set", "3.seed=1"]
    assert rank_argv(argv, 0, "/scratch") == argv
    other = rank_argv(argv, 1, "/scratch")
    assert other[0] == "-q" and "out" not in other and "--set" in other and "--no-progress" in other
    assert rank_argv(["bench", "--json=r.json"], 1, "/s") == ["-q", "bench", "--json=/s/json"]
