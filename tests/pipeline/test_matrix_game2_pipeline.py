"""Matrix-Game 2.0 through BlockDiffusionPipeline against the authors' traces (README_matrix_game2.md §4–5).

Every Matrix-Game 2.0 run in tests/fixtures (found by content: `config.action_config`) is run from its `info` metadata
alone (model config, steps, window, variant: mouse or not, keyboard width), checking every step's x0,
the outputs, all stored caches (main, mouse, keyboard) and the cache bookkeeping within 1e-4.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.engine.conditioning import matrix_game_request
from inferix_core.pipeline import BlockDiffusionPipeline
from inferix_core.scheduler import FlowMatchScheduler
from tests.fixture_utils import Recorder, assert_sigmas_used, files_of_kind, fixture_header, read_fixture
from tests.matrix_game2_utils import FixtureNoise, build, to_bfchw

ATOL = 1e-4
FILES = files_of_kind("matrix_game2")
pytestmark = pytest.mark.skipif(not FILES, reason="no Matrix-Game 2.0 fixture in tests/fixtures")


CACHE_KINDS = {"ring": {}, "paged": {"page_frames": 1}, "offload": {"page_frames": 1, "offload": "always"}}


def run_pipeline(path, cond=None, cache_kind: str = "ring"):
    info, t, model, sampling, cache_cfg, fixture_cond = build(path)
    cache_cfg = dataclasses.replace(cache_cfg, **CACHE_KINDS[cache_kind])
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    req = matrix_game_request(cond or fixture_cond, p["num_blocks"], noise=FixtureNoise(t),
                              block_frames=sampling.block_frames)  # fmt: skip
    rec = Recorder()
    out, caches, ends = [], {}, []
    layer = p["action_cache_recorded_layer"]
    for block in pipe.stream(req, rec):
        out.append(block.latents)
        pipe.settle()  # the block's context pass runs when the next block is asked for; the reference's is done
        c = pipe.kv_cache
        slot = c.layer_slots[layer]
        caches[block.index] = {
            "kv_cache": c.main.logical_kv(0),
            "kv_cache_keyboard": c.keyboard.logical_kv(slot),
            **({"kv_cache_mouse": c.mouse.logical_kv(slot)} if c.mouse is not None else {}),
        }
        ends.append((c.attended_tokens, c.end_frame * c.spec.frame_tokens, c.keyboard.attended_tokens,
                     c.keyboard.end_frame))  # fmt: skip
    return info, t, pipe, rec, torch.cat(out, dim=1), caches, ends


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_scheduler_tables(path):
    info, tensors = read_fixture(path)
    p = info["pipeline"]
    sch = FlowMatchScheduler(p["timestep_shift"], p["num_train_timesteps"], p["scheduler"]["num_inference_steps"])
    ts = sch.timesteps_for(p["denoising_step_list"], p["warp_denoising_step"])
    assert torch.equal(ts, tensors["timesteps_warped"])
    assert_sigmas_used(sch, ts, p, tensors["sigmas_used"])


@pytest.mark.parametrize("cache_kind", list(CACHE_KINDS))
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_pipeline_parity(path, cache_kind):
    """The whole run, with each main cache kind (the action caches are resident rings beside any of them)."""
    info, t, pipe, rec, latents, caches, ends = run_pipeline(path, cache_kind=cache_kind)
    p, tr = info["pipeline"], info["trace"]
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, to_bfchw(t["output_latents"]), atol=ATOL, rtol=0)
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], to_bfchw(t[f"block{b}.step{s}.x0_pred"]), atol=ATOL, rtol=0)
    layer = p["action_cache_recorded_layer"]
    checked = 0
    for b, stored in caches.items():
        for name, (k, v) in stored.items():
            tag = f"layer{0 if name == 'kv_cache' else layer}"
            key = f"{name}.{tag}.after_block{b}"
            if f"{key}.k" in t:
                torch.testing.assert_close(k, t[f"{key}.k"], atol=ATOL, rtol=0)
                torch.testing.assert_close(v, t[f"{key}.v"], atol=ATOL, rtol=0)
                checked += 1
    expected = sum(1 for k in t if k.startswith("kv_cache") and k.endswith(".k"))
    assert checked == expected > 0
    # cache bookkeeping of the reference: the main cache's of layer 0, the action caches' of layer L (the first
    # layer with an action module, `action_cache_recorded_layer`: its trace keys say layer{L}); all layers agree
    a = f"layer{layer}"
    assert [e[0] for e in ends] == tr["local_end_after_block_layer0_main"]
    assert [e[1] for e in ends] == tr["global_end_after_block_layer0_main"]
    assert [e[2] for e in ends] == tr[f"local_end_after_block_{a}_keyboard"]
    assert [e[3] for e in ends] == tr[f"global_end_after_block_{a}_keyboard"]
    c = pipe.kv_cache
    assert c.main.num_eviction_events == len(tr["eviction_calls_layer0_main"])
    assert c.keyboard.num_eviction_events == len(tr[f"eviction_calls_{a}_keyboard"])
    if c.mouse is not None:
        assert c.mouse.num_eviction_events == len(tr[f"eviction_calls_{a}_mouse"])
    assert c.main.num_calls == tr["model_calls"]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_model_call(path):
    """Each recorded call (stored input → flow), context passes included, within 1e-4."""
    from inferix_core.cache import KVCacheSpec, create_kv_cache

    info, t, model, sampling, cache_cfg, cond = build(path)
    p = info["pipeline"]
    _, _, F, H, W = p["latent_shape"]
    n, cfg = sampling.block_frames, model.config
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), n, 1, max_frames=F)
    cache = model.extend_kv_cache(create_kv_cache(cache_cfg, spec), cache_cfg, spec)
    ctx = model.prepare_context(t["visual_context"])
    with torch.no_grad():
        for b in range(p["num_blocks"]):
            block = cond.for_block(b * n, n)
            assert block.keyboard.shape[1] == info["trace"]["action_rows_passed_per_block"][b]
            for s in range(len(p["denoising_step_list"])):
                cache.begin(b * n, n)
                flow = model(t[f"block{b}.step{s}.input"], t[f"block{b}.step{s}.timestep"], ctx, cache, b * n, block)
                torch.testing.assert_close(flow, t[f"block{b}.step{s}.flow_pred"], atol=ATOL, rtol=0)
            cache.begin(b * n, n)
            x0 = t[f"block{b}.step{len(p['denoising_step_list']) - 1}.x0_pred"]
            flow = model(x0, t[f"block{b}.context.timestep"], ctx, cache, b * n, block)
            torch.testing.assert_close(flow, t[f"block{b}.context.flow_pred"], atol=ATOL, rtol=0)


# -- behaviour (README_matrix_game2.md §7): which action rows reach which block --------------------------------


def _per_block(latents, n):
    return latents.unflatten(1, (-1, n))  # (B, blocks, n, C, H, W)


def _block_diffs(path, change):
    """max |Δ| of each block's output when `change(cond)` edits the conditioning (same noise draws)."""
    info, t, model, sampling, cache_cfg, cond = build(path)
    n, p = sampling.block_frames, info["pipeline"]
    base = _run(model, sampling, cache_cfg, cond, t, p["num_blocks"])
    changed = dataclasses.replace(cond, keyboard=cond.keyboard.clone(),
                                  mouse=None if cond.mouse is None else cond.mouse.clone())  # fmt: skip
    change(changed)
    out = _run(model, sampling, cache_cfg, changed, t, p["num_blocks"])
    return (_per_block(out, n) - _per_block(base, n)).abs().flatten(2).amax(-1)[0].tolist()


def _run(model, sampling, cache_cfg, cond, t, num_blocks):
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    req = matrix_game_request(cond, num_blocks, noise=FixtureNoise(t), block_frames=sampling.block_frames)
    return pipe.generate(req)


def _flip(track, row):
    track[:, row] = 1 - track[:, row] if track.max() <= 1 and track.min() >= 0 else track[:, row] + 0.5


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_actions_reach_the_frames_they_belong_to(path):
    info, _ = read_fixture(path)
    n, rows = info["pipeline"]["num_frame_per_block"], info["pipeline"]["num_pixel_frames"]
    r = info["config"]["action_config"].get("vae_time_compression_ratio", 4)
    # block 0 gets rows 0 … r(n − 1); its last frame's window ends a row early, so row r(n − 1) is first used by
    # block 1 — unless n = 1, where that row is row 0, the padding every early window repeats
    last_of_block0 = r * (n - 1)
    if last_of_block0 > 0:
        d = _block_diffs(path, lambda c: _flip(c.keyboard, last_of_block0))
        assert d[0] == 0 and d[1] > 1e-3
    d = _block_diffs(path, lambda c: _flip(c.keyboard, max(last_of_block0 - 1, 0)))
    assert d[0] > 1e-3
    d = _block_diffs(path, lambda c: (_flip(c.keyboard, rows - 1), c.mouse is not None and _flip(c.mouse, rows - 1)))
    assert max(d) == 0  # the last row of the run is never used
    if info["pipeline"]["enable_mouse"] and last_of_block0 > 0:
        d = _block_diffs(path, lambda c: c.mouse[:, last_of_block0].add_(0.5))
        assert d[0] == 0 and d[1] > 1e-3


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_action_norm_weights_are_unused(path):
    info, t, model, sampling, cache_cfg, cond = build(path)
    base = _run(model, sampling, cache_cfg, cond, t, info["pipeline"]["num_blocks"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "action_model" in name and "attn_" in name and "norm" in name:
                p.mul_(3).add_(0.5)
    assert torch.equal(base, _run(model, sampling, cache_cfg, cond, t, info["pipeline"]["num_blocks"]))


MOUSE_FILES = [f for f in FILES if read_fixture(f)[0]["pipeline"]["enable_mouse"]]


@pytest.mark.slow
@pytest.mark.parametrize("path", MOUSE_FILES, ids=[f.name for f in MOUSE_FILES])
def test_opposite_mouse_directions_diverge_oppositely(path):
    """Turning right vs left (yaw ±0.1 on every row) from the same start moves the output in opposite directions."""
    info, t, model, sampling, cache_cfg, cond = build(path)
    num_blocks = info["pipeline"]["num_blocks"]
    keys = torch.zeros_like(cond.keyboard)
    outs = {}
    for yaw in (-0.1, 0.0, 0.1):
        mouse = torch.zeros_like(cond.mouse)
        mouse[..., 1] = yaw
        c = dataclasses.replace(cond, keyboard=keys, mouse=mouse)
        outs[yaw] = _run(model, sampling, cache_cfg, c, t, num_blocks)
    right, left = (outs[0.1] - outs[0.0]).flatten(), (outs[-0.1] - outs[0.0]).flatten()
    assert right.abs().max() > 1e-3 and left.abs().max() > 1e-3
    cosine = torch.nn.functional.cosine_similarity(right, left, dim=0)
    assert cosine < -0.5, f"right and left turns should move the output oppositely (cosine {cosine:.3f})"


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_live_session_rows_written_block_by_block(path):
    """As the authors' streaming demo: each block's new rows are written just before it (a different key per
    block), through start_stream/denoise_block; equals one finite run over the whole tracks."""
    info, t, model, sampling, cache_cfg, cond = build(path)
    n, num_blocks = sampling.block_frames, info["pipeline"]["num_blocks"]
    k = cond.keyboard.shape[-1]
    keyboard = torch.cat(
        [torch.eye(k)[b % k].expand(1, 1 + 4 * (n - 1) if b == 0 else 4 * n, k) for b in range(num_blocks)], 1
    )
    mouse = None if cond.mouse is None else torch.linspace(-0.1, 0.1, keyboard.shape[1])[None, :, None].expand(1, -1, 2)
    whole = dataclasses.replace(cond, keyboard=keyboard, mouse=mouse)
    expected = _run(model, sampling, cache_cfg, whole, t, num_blocks)

    first = 1 + 4 * (n - 1)
    live = dataclasses.replace(cond, keyboard=keyboard[:, :first], mouse=None if mouse is None else mouse[:, :first])
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    _, _, _, h, w = cond.cond_concat.shape
    state = pipe.start_stream(cond.visual_context, h, w, noise=FixtureNoise(t), max_frames=num_blocks * n)
    got = []
    for b in range(num_blocks):
        if b > 0:
            a, z = first + 4 * n * (b - 1), first + 4 * n * b
            live.extend_actions(keyboard[:, a:z], None if mouse is None else mouse[:, a:z])
        got.append(pipe.denoise_block(state, action=live.for_block(state.next_frame, n)).latents)
    torch.testing.assert_close(torch.cat(got, 1), expected, atol=1e-6, rtol=0)


def test_some_fixture_stores_first_call_intermediates():
    """The test below checks something: at least one Matrix-Game 2.0 fixture stores `first_call.debug.*`."""
    stored = [f.name for f in FILES if any(k.startswith("first_call.debug.") for k in fixture_header(f)[1])]
    assert stored or not FILES, "no Matrix-Game 2.0 fixture stores first_call.debug.*: the intermediates go unchecked"


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_first_call_intermediates(path):
    """The stored `first_call.debug.*` tensors (block 0, step 0): embeddings, each block's attentions, action
    module input/output and output, and the head, captured with forward hooks on the same modules."""
    from inferix_core.cache import KVCacheSpec, create_kv_cache

    info, t, model, sampling, cache_cfg, cond = build(path)
    stored = {k.removeprefix("first_call.debug."): v for k, v in t.items() if k.startswith("first_call.debug.")}
    if not stored:
        pytest.skip("this fixture stores no first-call intermediates")
    got, hooks = {}, []
    modules = dict(model.named_modules())

    def record(name, what):
        def hook(module, inputs, output):  # returns None: a hook's return value would replace the output
            got.setdefault(name, (inputs[0] if what == "input" else output).clone())

        return hook

    for name in stored:
        what = "input" if name.endswith(".input") else "output"
        target = name.removesuffix(".input").removesuffix(".output")
        hooks.append(modules[target].register_forward_hook(record(name, what)))
    _, _, F, H, W = info["pipeline"]["latent_shape"]
    n, cfg = sampling.block_frames, model.config
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), n, 1, max_frames=F)
    cache = model.extend_kv_cache(create_kv_cache(cache_cfg, spec), cache_cfg, spec)
    with torch.no_grad():
        ctx = model.prepare_context(t["visual_context"])
        cache.begin(0, n)
        model(t["block0.step0.input"], t["block0.step0.timestep"], ctx, cache, 0, cond.for_block(0, n))
    for h in hooks:
        h.remove()
    assert set(got) == set(stored)
    for name, ref in stored.items():
        torch.testing.assert_close(got[name].reshape(ref.shape), ref, atol=ATOL, rtol=0, msg=name)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_cuda_eager_and_compiled_match_the_fixture(path):
    """On the GPU in fp32, eager and with compile_blocks (the action inputs are fixed-shape tensors, so the
    blocks compile once, not once per block): the reference's latents within TF32-level error."""
    from inferix_core.models.wan.causal_transformer import compile_blocks

    info, t, model, sampling, cache_cfg, cond = build(path)
    model = model.cuda()
    for compiled in (False, True):
        if compiled:
            compile_blocks(model)
        out = _run(model, sampling, cache_cfg, cond, t, info["pipeline"]["num_blocks"]).cpu()
        torch.testing.assert_close(out, to_bfchw(t["output_latents"]), atol=5e-3, rtol=0)


def test_compiled_blocks_capture_once():
    """Compiled blocks (dynamo, eager backend: no C++ compiler needed) capture their graphs in the first block
    and never again, although the action tracks grow every block; the result stays the reference's."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    path = FILES[0]
    info, t, model, sampling, cache_cfg, cond = build(path)
    torch._dynamo.reset()
    counters.clear()
    for block in model.blocks:
        block.compile(backend="eager", dynamic=False)
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    graphs, spans, outs = [], [], []
    for out in pipe.stream(matrix_game_request(cond, info["pipeline"]["num_blocks"], noise=FixtureNoise(t))):
        graphs.append(counters["stats"]["unique_graphs"])
        spans.append(pipe.stream_state.cache.attended_tokens)  # the main cache's span, as the blocks see it
        outs.append(out.latents)
    torch._dynamo.reset()
    # New graphs only while the attended span still grows (the window filling); once a span repeats, the
    # action tracks growing with every block must not capture again.
    assert graphs[0] > 0, graphs
    steady = next((i for i in range(1, len(spans)) if spans[i] == spans[i - 1]), None)
    assert steady is not None, f"the window never filled in this fixture's run: spans {spans}"
    assert len(set(graphs[steady - 1 :])) == 1, (graphs, spans)
    torch.testing.assert_close(torch.cat(outs, 1), to_bfchw(t["output_latents"]), atol=ATOL, rtol=0)
