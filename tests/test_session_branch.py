"""'Branch here' in an interactive session (issue #22): futures side by side in the live view, one kept.

Tiny random model with actions and the tiny Wan VAE, CPU fp32. Keeping the future that continues the
stream's own prompt and noise gives the video of a session that never branched; keeping none goes on
from the branch point unchanged; keeping another switches to its prompt. Sinks that show branches get
the side-by-side frames, the others only the kept future's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.clients.session import InteractiveSession
from inferix_core.errors import ConfigError
from tests.test_api import tiny_world
from tests.test_session import ACTIONS, WINDOW


@pytest.fixture(scope="module")
def world():
    return tiny_world(action_names=ACTIONS)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(7)
    return {name: torch.randn(1, 4, 8, generator=g) for name in ("start", "beach", "snow")}


class ListSink:
    def __init__(self, shows_branches=False):
        self.shows_branches, self.blocks = shows_branches, []

    def write(self, frames, index):
        self.blocks.append((index, np.asarray(frames)))

    def close(self):
        pass


def _session(world, prompts, sinks):
    return InteractiveSession(world, "start", width=48, height=32, seed=3, cache=WINDOW, sinks=sinks,
                              prompt_encoder=prompts.__getitem__, default_action="left")  # fmt: skip


def _frames(sink):
    return np.concatenate([f for _, f in sink.blocks])


@pytest.mark.slow  # two decoded sessions of 5 blocks with the tiny Wan VAE
def test_keeping_the_stream_s_own_future_equals_never_branching(world, prompts):
    plain_sink = ListSink()
    plain = _session(world, prompts, [plain_sink])
    want = [plain.step().latents for _ in range(5)]
    out, live = ListSink(), ListSink(shows_branches=True)
    s = _session(world, prompts, [out, live])
    got = [s.step().latents for _ in range(2)]
    s.send({"type": "branch", "futures": [None, "beach"]})
    for _ in range(2):
        block = s.step()
        assert s.branching and block.latents.shape[0] == 2  # one row per future
        assert block.frames.shape[2] == 2 * 48  # side by side
        got.append(block.latents[:1])
    assert [i for i, _ in out.blocks] == [0, 0, 1]  # block 0 in two writes (its first frame alone); waits for the pick
    s.send({"type": "pick", "index": 0})
    got.append(s.step().latents)
    assert not s.branching
    for a, b in zip(want, got, strict=True):
        assert (a - b).abs().max().item() <= 1e-5
    assert [i for i, _ in out.blocks] == [0, 0, 1, 2, 3, 4]
    assert np.abs(_frames(out).astype(int) - _frames(plain_sink).astype(int)).max() <= 1
    assert [f.shape[2] for i, f in live.blocks if i in (2, 3)] == [96, 96]


def test_keep_none_goes_on_unchanged_and_another_future_switches_prompt(world, prompts):
    plain = InteractiveSession(world, "start", width=48, height=32, seed=3, cache=WINDOW, decode=False,
                               prompt_encoder=prompts.__getitem__, default_action="left")  # fmt: skip
    want = [plain.step().latents for _ in range(3)]
    s = InteractiveSession(world, "start", width=48, height=32, seed=3, cache=WINDOW, decode=False,
                           prompt_encoder=prompts.__getitem__, default_action="left")  # fmt: skip
    s.step(), s.step()
    s.send({"type": "branch", "futures": ["snow", "beach"]})
    s.step()
    s.send({"type": "pick", "index": -1})  # keep none: the stream goes on from the branch point
    assert torch.equal(s.step().latents, want[2])  # its cache and noise were never touched
    s.send({"type": "branch", "futures": ["snow", "beach"]})
    s.step()
    s.send({"type": "pick", "index": 1})
    s.step()
    assert s.prompt == "beach" and s.prompt_log[-1] == (3, "beach")  # from the fork's first block
    assert s.state.next_block == 5 and not s.branching


def test_branch_events_are_validated():
    from inferix_core.sinks.live import InputQueue

    q = InputQueue(set(ACTIONS))
    assert q.validate({"type": "branch", "futures": ["", None, "snow"]})["futures"] == [None, None, "snow"]
    with pytest.raises(ConfigError, match="futures"):
        q.validate({"type": "branch", "futures": ["a"] * 5})
    with pytest.raises(ConfigError, match="index"):
        q.validate({"type": "pick", "index": "1"})
    assert q.validate({"type": "pick", "index": -1})["index"] == -1


def test_a_kept_future_re_caches_with_window_reset(world, prompts):
    """LongLive's global_sink: false re-cache relabels a ring cache: the future kept after a branch (its pages in
    an arena) goes back into a ring, and a later switch re-caches as an unbranched session does."""

    def run(branch: bool):
        s = InteractiveSession(world, "start", width=48, height=32, seed=3, cache=WINDOW, decode=False,
                               prompt_encoder=prompts.__getitem__, recache_style="window_reset")  # fmt: skip
        out = [s.step().latents for _ in range(3)]
        if branch:
            s.send({"type": "branch", "futures": [None, "beach"]})
            out.append(s.step().latents[:1])
            s.send({"type": "pick", "index": 0})
        else:
            out.append(s.step().latents)
        for _ in range(3):
            out.append(s.step().latents)
        s.send({"type": "prompt", "text": "beach"})
        out += [s.step().latents for _ in range(2)]
        assert s.num_recaches == 1
        return torch.cat(out, dim=1)

    branched, plain = run(True), run(False)
    assert torch.isfinite(branched).all()
    assert (branched - plain).abs().max().item() <= 1e-5 * float(plain.abs().max())
