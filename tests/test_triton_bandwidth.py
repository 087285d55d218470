"""bench/triton_bandwidth.py's accounting, on the CPU: every graph's calls are kept, and the totals are theirs.

Inductor clears its list of profiled kernel calls at each compiled graph's start; the script's `end_graph`
must move them out first, or a run of many graphs would report its last graph only. The totals and the
efficiency are checked against a direct sum over fresh random calls.
"""

from __future__ import annotations

import random

import pytest
import torch._inductor.config as inductor_config
from torch._inductor.runtime import triton_heuristics

from bench.triton_bandwidth import arm, summarise


@pytest.fixture
def restore_inductor(monkeypatch):
    monkeypatch.setattr(inductor_config, "profile_bandwidth", inductor_config.profile_bandwidth)
    monkeypatch.setattr(inductor_config, "profile_bandwidth_regex", inductor_config.profile_bandwidth_regex)
    monkeypatch.setattr(triton_heuristics, "end_graph", triton_heuristics.end_graph)
    monkeypatch.setattr(triton_heuristics, "collected_calls", [])


def test_every_graphs_calls_are_kept(restore_inductor):
    calls = arm()
    assert inductor_config.profile_bandwidth
    rng = random.Random(0)
    graphs = [[(rng.uniform(0.01, 1), rng.uniform(0.001, 0.5), 0.0, f"k{rng.randrange(5)}") for _ in range(3)]
              for _ in range(4)]  # fmt: skip
    for graph in graphs:
        triton_heuristics.start_graph()
        triton_heuristics.collected_calls.extend(graph)
        triton_heuristics.end_graph(None)
    assert calls == [c for g in graphs for c in g]


def test_totals_and_efficiency():
    rng = random.Random(1)
    calls = [(rng.uniform(0.01, 2), rng.uniform(0.001, 1), 0.0, f"k{rng.randrange(6)}") for _ in range(50)]
    r = summarise(calls, copy_gbps=4000.0, top=3)
    seconds, gb = sum(c[0] for c in calls) / 1e3, sum(c[1] for c in calls)
    assert r["kernel_calls"] == 50 and r["kernels"] == len({c[3] for c in calls})
    assert r["isolated_s"] == pytest.approx(seconds) and r["gb"] == pytest.approx(gb)
    assert r["efficiency"] == pytest.approx(gb / seconds / 4000.0)
    assert len(r["top"]) == 3 and r["top"][0]["s"] >= r["top"][1]["s"] >= r["top"][2]["s"]
    assert sum(k["calls"] for k in summarise(calls, 4000.0, top=99)["top"]) == 50
