"""LongLive's `global_sink: false` (their training setting): what a fixture can show without our engine running it.

A prompt-switch run repeated with `pipeline.global_sink` false stores `output_latents_global_sink_false`
(README_families.md, "Prompt switch"); gen_longlive.py also keeps that run's cache right after each re-cache as
`global_sink_false.kv_cache.layer{l}.after_recache{b}.{k,v}` beside the `global_sink: true` run's
`kv_cache.layer{l}.after_recache{b}.{k,v}`. The checks are docs/longlive_global_sink.md's claims: the setting
changes nothing until a re-cache starts after frame 0 (switch frame > local_attn_size) and changes the output
after it; with it false a re-cache writes its frames r..S-1 into slots 0.. (the sink slots get frames r..r+K-1)
and leaves the rest zero, with it true such a re-cache keeps the sink slots and writes the same window slots.

Our engine runs it as `recache_style` "window_reset" (pipeline/recache.py; "window" is `global_sink: true`), chosen
by a LongLive config beside the weights (`global_sink: false`) or by the caller: the parity tests at the end replay
the false run through the interactive session and as a finite request.
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


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_window_reset_matches_their_global_sink_false_run(path, tmp_path):
    """Their interactive run repeated with global_sink false, through our InteractiveSession with "window_reset"
    (the same noise, prompts, switch blocks): within the LongLive parity tolerance, and far from "window"."""
    from tests.models.test_longlive_parity import replay_session

    info, t, session, latents = replay_session(path, tmp_path, recache_style="window_reset")
    assert session.num_recaches == len(info["switch"]["switch_block_indices"])
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t[KEY], atol=ATOL, rtol=0)
    # the same number of frames stays resident as with global_sink true, the history holds the last window
    assert len(session.state.cache.resident_frames()) == min(
        session.state.next_frame, session.state.cache.capacity_frames
    )


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_window_reset_as_a_finite_request(path, tmp_path):
    """The same false run as one request with a prompt schedule (Block Denoise / generate_video's path)."""
    from tests.models.test_longlive_parity import schedule_run

    _, t, _, latents = schedule_run(path, tmp_path, "window_reset")
    torch.testing.assert_close(latents, t[KEY], atol=ATOL, rtol=0)


def test_a_longlive_config_beside_the_weights_picks_the_recache(tmp_path):
    """global_sink read from the authors' config beside the weights: false → "window_reset", true → "window",
    absent → the family's default (None here); other families never read it."""
    from inferix_core.models.family_detect import recache_style_beside

    weights = tmp_path / "longlive_base.pt"
    weights.write_bytes(b"")
    assert recache_style_beside(weights, "longlive") is None
    (tmp_path / "longlive_inference.yaml").write_text("global_sink: false\nlocal_attn_size: 12\n")
    assert recache_style_beside(weights, "longlive") == "window_reset"
    assert recache_style_beside(weights, "self_forcing") is None
    (tmp_path / "longlive_inference.yaml").write_text("global_sink: true\n")
    assert recache_style_beside(weights, "longlive") == "window"


def test_window_reset_refuses_a_cache_it_cannot_relabel():
    """Only the ring cache can say its sink slots hold later frames: a paged one is refused before any model work
    (a session, a request with a prompt schedule), in one line naming the fix; a wrong style name too."""
    from inferix_core.cache import KVCacheConfig
    from inferix_core.clients.session import InteractiveSession
    from inferix_core.errors import ConfigError
    from inferix_core.pipeline import GenerationRequest
    from inferix_core.pipeline.loop import RequestInputs
    from tests.test_api import tiny_world

    wm = tiny_world()
    paged = KVCacheConfig(window_frames=4, sink_frames=2, page_frames=2)
    g = torch.Generator().manual_seed(3)
    prompts = {name: torch.randn(1, 4, 8, generator=g) for name in ("a", "b")}
    with pytest.raises(ConfigError, match="ring KV cache, not the paged one: set page_frames 0"):
        InteractiveSession(wm, "a", width=48, height=32, cache=paged, decode=False,
                           prompt_encoder=prompts.__getitem__, recache_style="window_reset")  # fmt: skip
    with pytest.raises(ConfigError, match="is not one of"):
        InteractiveSession(wm, "a", width=48, height=32, decode=False, prompt_encoder=prompts.__getitem__,
                           recache_style="windows", hard_switch=True)  # fmt: skip
    pipe = InteractiveSession(wm, "a", width=48, height=32, cache=paged, decode=False,
                              prompt_encoder=prompts.__getitem__).pipeline  # fmt: skip
    req = GenerationRequest(3, 4, 6, prompts["a"], prompt_schedule=[(1, prompts["b"])], recache_on_switch=True,
                            recache_style="window_reset")  # fmt: skip
    with pytest.raises(ConfigError, match="ring KV cache"):
        RequestInputs(pipe, req)
    # the ring cache of the same window runs it: a switch re-caches, the stream goes on
    session = InteractiveSession(wm, "a", width=48, height=32, cache=KVCacheConfig(window_frames=4, sink_frames=2),
                                 decode=False, prompt_encoder=prompts.__getitem__, recache_style="window_reset")  # fmt: skip
    for _ in range(3):
        session.step()
    session.switch_prompt("b")
    out = session.step()
    assert session.num_recaches == 1 and torch.isfinite(out.latents).all()


@pytest.mark.parametrize("path", FILES[:1], ids=[p.name for p in FILES[:1]])
def test_the_loader_reads_global_sink_from_the_config_beside_the_weights(path, tmp_path):
    """A LongLive checkpoint with their config beside it (`global_sink: false`) loads with recache_style
    "window_reset", which a session then uses; without the config the family's "window" stays."""
    import shutil

    from inferix_core.clients.session import InteractiveSession
    from inferix_core.models.registry import load_world_model

    info, t = read_fixture(path)
    weights = path.parent / info.get("weights_file", path.name)
    shutil.copy(weights, tmp_path / "longlive_base.safetensors")
    plain = load_world_model(str(tmp_path / "longlive_base.safetensors"), family="longlive", device="cpu", dtype="fp32")
    assert plain.recache_style is None
    (tmp_path / "longlive_interactive_inference.yaml").write_text("global_sink: false\n")
    wm = load_world_model(str(tmp_path / "longlive_base.safetensors"), family="longlive", device="cpu", dtype="fp32")
    assert wm.recache_style == "window_reset"
    p = info["pipeline"]
    _b, _f, _c, h, w = p["latent_shape"]
    session = InteractiveSession(wm, t["text_context"], width=8 * w, height=8 * h, decode=False)
    assert session.recache_style == "window_reset"
