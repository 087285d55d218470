"""The ActionModule alone against the authors' traces (`action_module_*.safetensors`, README_matrix_game2.md §3.5, §5.2).

Every file is found by glob and run from its `info` (config, call geometry, cache size): all calls'
outputs, both caches after every block, the cache bookkeeping, and the sub-module intermediates of the
debug calls, within 1e-4.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig, KVCacheSpec
from inferix_core.cache.ring import RingKVCache
from inferix_core.models.wan.action_module import (
    ACTION_HEAD_DIM,
    ActionConfig,
    ActionKVCache,
    ActionModule,
    action_inputs,
    action_rope_table,
    apply_action_rope,
)
from tests.fixture_utils import files_of_kind, fixture_weights, read_fixture

ATOL = 1e-4
FILES = files_of_kind("action_module")
pytestmark = pytest.mark.skipif(not FILES, reason="no ActionModule fixture in tests/fixtures")
SUBMODULES = ("mouse_mlp", "t_qkv", "proj_mouse", "keyboard_embed", "keyboard_attn_kv", "mouse_attn_q", "proj_keyboard")


def build(path, main_sink: int = 0):
    """The module and its caches, built as the pipeline builds them: around a main cache of the same window
    whose sink is `main_sink` (the action caches must have no sink whatever it is)."""
    info, t = read_fixture(path)
    cfg = ActionConfig.from_dict(info["config"])
    module = ActionModule(cfg, cfg.img_hidden_size).eval()
    module.load_state_dict({k: v.clone() for k, v in fixture_weights(path, info, t).items()}, strict=True)
    call = info["call"]
    size = call.get("cache_size_frames", info["config"].get("local_attn_size"))  # README: config has local_attn_size
    window = KVCacheConfig(window_frames=size, sink_frames=main_sink)
    spec = KVCacheSpec(num_layers=max(cfg.blocks) + 1, num_heads=1, head_dim=ACTION_HEAD_DIM,
                       frame_tokens=call["th"] * call["tw"], block_frames=call["num_frame_per_block"])  # fmt: skip
    caches = ActionKVCache.build(RingKVCache(window, spec), window, spec, cfg)
    return info, t, module, caches


def run_calls(path, mutate=None, main_sink: int = 0):
    info, t, module, kv = build(path, main_sink)
    mouse, keyboard = kv.mouse, kv.keyboard
    layer = min(module.config.blocks)
    if mutate is not None:
        mutate(module)
    call, n = info["call"], info["call"]["num_frame_per_block"]
    s = call["th"] * call["tw"]
    records, outputs, caches, ends = {}, {}, {}, []
    hooks = []
    for name in SUBMODULES:
        if hasattr(module, name):
            hooks.append(getattr(module, name).register_forward_hook(
                lambda m, i, o, name=name: records.__setitem__(name, (i[0].clone(), o.clone()))))  # fmt: skip
    with torch.no_grad():
        for b in range(call["num_blocks"]):
            start = n * b
            rows = 1 + 4 * (start + n - 1)
            for c in range(call.get("calls_per_block", 2)):  # README_matrix_game2 §5.2: two calls per block
                records.clear()
                kv.begin(start, n)
                act = action_inputs(
                    module.config,
                    t["keyboard_cond"][:, :rows],
                    t["mouse_cond"][:, :rows] if "mouse_cond" in t else None,
                    start,
                    n,
                    s,
                )
                act = act._replace(**dict(zip(("mouse_kv", "keyboard_kv"), kv.action_views(layer), strict=True)))
                outputs[(b, c)] = module(t[f"block{b}.call{c}.hidden_states"], act)
                if b in call.get("debug_blocks", ()) and c == 0:
                    caches[("debug", b)] = dict(records)
                ends.append([(x.attended_tokens, x.end_frame) for x in (mouse, keyboard) if x is not None])
            caches[b] = {"keyboard": keyboard.logical_kv(0), **({"mouse": mouse.logical_kv(0)} if mouse else {})}
    for h in hooks:
        h.remove()
    return info, t, module, outputs, caches, ends, (mouse, keyboard)


def _largest_sink(path) -> int:
    """The most sink frames a main cache of the fixture's window can hold beside one block (window − block)."""
    info, _ = read_fixture(path)
    call = info["call"]
    size = call.get("cache_size_frames", info["config"].get("local_attn_size"))
    return size - call["num_frame_per_block"]


@pytest.mark.parametrize("with_sink", [False, True], ids=["no_sink", "main_sink"])
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_outputs_and_caches(path, with_sink):
    """Every call and both caches; also beside a main cache with sink frames (the action caches have none)."""
    main_sink = _largest_sink(path) if with_sink else 0
    if with_sink and main_sink <= 0:
        pytest.skip("the fixture's window holds no sink beside a block")
    info, t, _, outputs, caches, ends, (mouse, keyboard) = run_calls(path, main_sink=main_sink)
    call = info["call"]
    for (b, c), out in outputs.items():
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, t[f"block{b}.call{c}.output"], atol=ATOL, rtol=0)
    for b in range(call["num_blocks"]):
        for name, (k, v) in caches[b].items():
            torch.testing.assert_close(k, t[f"kv_cache_{name}.after_block{b}.k"], atol=ATOL, rtol=0)
            torch.testing.assert_close(v, t[f"kv_cache_{name}.after_block{b}.v"], atol=ATOL, rtol=0)
    tr = info.get("trace", {})  # the bookkeeping the generator recorded (for checking; absent keys are not)
    ours = {"keyboard_local_global_end_after_call": [list(e[-1]) for e in ends],
            "eviction_calls_keyboard": keyboard.num_eviction_events}  # fmt: skip
    if mouse is not None:
        ours.update(mouse_local_global_end_after_call=[list(e[0]) for e in ends],
                    eviction_calls_mouse=mouse.num_eviction_events)  # fmt: skip
    for key, value in ours.items():
        if key in tr:
            assert value == (len(tr[key]) if key.startswith("eviction_calls") else tr[key]), key


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_debug_intermediates(path):
    info, t, module, _, caches, _, _ = run_calls(path)
    n, r = info["call"]["num_frame_per_block"], module.config.vae_time_compression_ratio
    if not info["call"].get("debug_blocks"):
        pytest.skip("this fixture stores no debug intermediates (call.debug_blocks empty)")
    checked = 0
    for b in info["call"]["debug_blocks"]:
        rec = caches[("debug", b)]
        # every sub-module the fixture stores (README_matrix_game2 §5.2 `block{b}.call0.debug.<sub>.*`) is
        # compared: how many there are depends on the config (no mouse: no mouse_mlp, t_qkv, proj_mouse)
        prefix = f"block{b}.call0.debug."
        stored = {k[len(prefix) : -len(".output")] for k in t if k.startswith(prefix) and k.endswith(".output")}
        assert stored and stored <= set(rec), (b, sorted(stored - set(rec)))
        for name, (inp, out) in rec.items():
            ref_in, ref_out = t[f"block{b}.call0.debug.{name}.input"], t[f"block{b}.call0.debug.{name}.output"]
            if name == "keyboard_embed":  # the authors embed the padded rows from r·start on; we embed the windows
                local = r * torch.arange(n)[:, None] + torch.arange(module.config.window_rows)[None, :]
                ref_in, ref_out = ref_in[:, local], ref_out[:, local]
            torch.testing.assert_close(inp, ref_in, atol=ATOL, rtol=0)
            torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
            checked += 1
    assert checked


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_unused_norm_weights_change_nothing(path):
    """The four RMSNorm weights are in the checkpoint but unused (README §3.5.1): scaling them changes nothing."""
    _, _, _, base, *_ = run_calls(path)

    def scale_norms(m):
        for name, p in m.named_parameters():
            if "norm" in name and "mouse_mlp" not in name:
                p.data.mul_(3).add_(0.5)

    _, _, _, changed, *_ = run_calls(path, scale_norms)
    for key in base:
        assert torch.equal(base[key], changed[key])


def test_rope_rotates_only_the_first_dims():
    """Pairs beyond mouse_qk_dim_list[0] are not rotated; the first pairs rotate by pos·theta^(−2i/d_t)."""
    cos, sin = action_rope_table(torch.arange(5, 8), (8, 28, 28), 256)
    x = torch.randn(2, 3, 1, 64)
    out = apply_action_rope(x, cos, sin)
    torch.testing.assert_close(out[..., 8:], x[..., 8:], atol=0, rtol=0)
    angle = 6 * 256 ** (-2 / 8)  # position 6 (second row), pair 1
    re, im = x[:, 1, 0, 2], x[:, 1, 0, 3]
    expected = torch.stack([re * torch.cos(torch.tensor(angle)) - im * torch.sin(torch.tensor(angle)),
                            im * torch.cos(torch.tensor(angle)) + re * torch.sin(torch.tensor(angle))], -1)  # fmt: skip
    torch.testing.assert_close(out[:, 1, 0, 2:4], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("window", [6, -1], ids=["window", "global"])
def test_action_caches_follow_the_main_cache(window):
    """begin / restart / reset reach all three caches; the action caches hold frames of the main window, no sink."""
    cfg = ActionConfig(blocks=(0, 2), heads_num=1, hidden_size=4, img_hidden_size=8, keyboard_hidden_dim=64,
                       mouse_hidden_dim=64)  # fmt: skip
    main_cfg = KVCacheConfig(window_frames=window, sink_frames=3 if window > 0 else 0)
    spec = KVCacheSpec(num_layers=3, num_heads=1, head_dim=2, frame_tokens=5, block_frames=3, max_frames=12)
    kv = ActionKVCache.build(RingKVCache(main_cfg, spec), main_cfg, spec, cfg)
    assert kv.layer_slots == {0: 0, 2: 1} and kv.mouse.spec.batch_size == 5 and kv.keyboard.spec.batch_size == 1
    for start in (0, 3, 6, 9):
        kv.begin(start, 3)
    if window > 0:
        assert kv.main.resident_frames() == [0, 1, 2, 9, 10, 11]
        assert kv.mouse.resident_frames() == kv.keyboard.resident_frames() == list(range(6, 12))  # no sink
        kv.restart(15)
        assert kv.main.end_frame == kv.mouse.end_frame == kv.keyboard.end_frame == 15
        assert kv.mouse.resident_frames() == kv.keyboard.resident_frames() == []
    else:
        assert kv.main.resident_frames() == kv.keyboard.resident_frames() == list(range(12))
    stats = kv.stats()
    assert stats["action_resident_bytes"] > 0
    assert stats["resident_bytes"] == kv.main.stats()["resident_bytes"] + stats["action_resident_bytes"]
    kv.reset()
    assert kv.main.end_frame == kv.mouse.end_frame == kv.keyboard.end_frame == 0
    assert kv.attended_tokens == 0  # everything else is the main cache's
