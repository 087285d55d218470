"""LongLive's `global_sink: false` (their training setting): what a fixture can show without our engine running it.

A prompt-switch run repeated with `pipeline.global_sink` false stores `output_latents_global_sink_false`
(README_families.md, "Prompt switch"); gen_longlive.py also keeps that run's cache right after each re-cache as
`global_sink_false.kv_cache.layer{l}.after_recache{b}.{k,v}` beside the `global_sink: true` run's
`kv_cache.layer{l}.after_recache{b}.{k,v}`. The checks are docs/longlive_global_sink.md's claims: the setting
changes nothing until a re-cache starts after frame 0 (switch frame > local_attn_size) and changes the output
after it; with it false a re-cache writes its frames r..S-1 into slots 0.. (the sink slots get frames r..r+K-1)
and leaves the rest zero, with it true such a re-cache keeps the sink slots and writes the same window slots.

Our engine has no setting for it (no config field selects it; `recache_style` "window" is `global_sink: true`),
so there is no parity test against our pipeline here.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.fixture_utils import files_of_kind, has_switch, read_fixture

ATOL = 1e-4  # the parity tolerance of the LongLive tests (tests/models/test_longlive_parity.py)
KEY = "output_latents_global_sink_false"
FILES = files_of_kind("causal_wan", lambda info, names: has_switch(info, names) and KEY in names)
DUMP = re.compile(r"^(global_sink_false\.)?kv_cache\.layer(\d+)\.after_recache(\d+)\.([kv])$")


def test_some_fixture_has_a_global_sink_false_run():
    assert FILES, "no fixture with output_latents_global_sink_false (bench/fixtures/gen_longlive.py writes one)"


def recaches(info: dict) -> dict[int, tuple[int, int]]:
    """{block index: (first, end) latent frames re-cached before it} from the documented `info.switch`."""
    sw = info["switch"]
    return dict(zip(sw["switch_block_indices"], (tuple(f) for f in sw["recache_frames"]), strict=True))


def dumps(t: dict) -> dict[tuple[bool, int, int, str], torch.Tensor]:
    """{(global_sink false?, layer, block, "k"/"v"): cache [B, tokens, heads, head_dim]} of the stored dumps."""
    out = {}
    for name, v in t.items():
        m = DUMP.match(name)
        if m:
            out[(bool(m[1]), int(m[2]), int(m[3]), m[4])] = v
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_global_sink_false_output_is_a_finite_run_of_the_same_shape(path):
    _, t = read_fixture(path)
    assert t[KEY].shape == t["output_latents"].shape
    assert torch.isfinite(t[KEY]).all()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_global_sink_false_changes_the_output_only_after_a_recache_past_frame_0(path):
    """Identical frames up to the first block whose re-cache starts after frame 0, different (> ATOL) after it."""
    info, t = read_fixture(path)
    late = sorted(end for first, end in recaches(info).values() if first > 0)
    same = late[0] if late else t["output_latents"].shape[1]
    true, false = t["output_latents"], t[KEY]
    torch.testing.assert_close(false[:, :same], true[:, :same], rtol=0, atol=0)
    if late:
        diff = (false[:, same:] - true[:, same:]).abs().max().item()
        assert diff > ATOL, f"global_sink false changes the frames after {same} by only {diff:.2e}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_cache_slots_after_a_recache(path):
    """The dumps right after each re-cache [r, S), K sink frames, ft tokens per frame (docs/longlive_global_sink.md):
    false: slots [0, S-r) written, the rest exactly zero; r = 0: both runs' caches equal; r > 0: equal window slots
    [K, S-r) at layer 0 (a token's layer-0 K/V depend on its own frame only), different sink slots, and the true
    run's sink unchanged since its previous dump. Layer 0, false run: a frame in two dumps has the same K/V, so
    the sink slots after a re-cache from r hold frames r..r+K-1 (not 0..K-1)."""
    info, t = read_fixture(path)
    d = dumps(t)
    if not any(false for false, *_ in d):
        pytest.skip("no global_sink_false.kv_cache dumps in this fixture")
    p, rc = info["pipeline"], recaches(info)
    ft, sink = p["frame_seq_length"], p["sink_size"] * p["frame_seq_length"]
    seen: dict[tuple[int, str, int], torch.Tensor] = {}  # layer-0 (layer, kv, frame) -> K/V, false run
    previous_true: dict[tuple[int, str], torch.Tensor] = {}
    for (false, layer, block, kv), cache in sorted(d.items(), key=lambda item: (item[0][2], item[0][0])):
        first, end = rc[block]
        written = (end - first) * ft
        other = d.get((not false, layer, block, kv))
        where = f"{'false' if false else 'true'} layer{layer} after_recache{block} {kv}"
        if false:
            assert not cache[:, written:].any(), f"{where}: slots past {written} not zero"
            for i in range(end - first):
                assert cache[:, i * ft : (i + 1) * ft].abs().max() > 0, f"{where}: frame {first + i} not written"
                if layer == 0:
                    key = (layer, kv, first + i)
                    if key in seen:
                        torch.testing.assert_close(cache[:, i * ft : (i + 1) * ft], seen[key], rtol=0, atol=1e-5)
                    seen[key] = cache[:, i * ft : (i + 1) * ft]
        if other is not None and false:
            if first == 0:
                torch.testing.assert_close(cache, other, rtol=0, atol=0)
            else:
                if layer == 0:
                    torch.testing.assert_close(cache[:, sink:written], other[:, sink:written], rtol=0, atol=1e-6)
                assert (cache[:, :sink] - other[:, :sink]).abs().max() > ATOL, f"{where}: sink slots as the true run's"
        if not false:
            if first > 0 and (layer, kv) in previous_true:
                torch.testing.assert_close(cache[:, :sink], previous_true[(layer, kv)][:, :sink], rtol=0, atol=0)
            previous_true[(layer, kv)] = cache
