"""bench/bench_session_latency.py on the CPU (tiny preset): each step's frames reach the sink before it returns.

The GPU run reports how much sooner; here the protocol runs end to end and the order it measures holds.
"""

from __future__ import annotations

import json

from bench.bench_session_latency import main


def test_frames_reach_the_sink_before_each_step_ends(tmp_path):
    out = tmp_path / "s.json"
    assert main(["--preset", "tiny", "--variant", "eager", "--blocks", "3", "--device", "cpu", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert len(r["steps"]) == 3
    for step in r["steps"]:
        assert step["frames"] > 0
        assert 0 < step["frames_s"] < step["step_s"], step
    assert r["median_earlier_s"] > 0
