"""Parity with other families' own inference code (CausVid, Causal-Forcing, Krea Realtime, …) on tiny models.

Every Self-Forcing-schema run in tests/fixtures without a LoRA or a prompt switch (those are
tests/models/test_longlive_parity.py's) is found by content and run through our engine from its metadata
alone: the authors' settings in `info.pipeline` become our SamplingConfig / KVCacheConfig. What the registry
ships is checked against the released configs in tests/models/test_registry_settings.py, not here: a fixture
may be made with any settings. A Krea fixture run with their `keep_first_frame=False` names its tiny
Wan VAE (`vae_file`, an optional extra): our run re-encodes through it (`PixelWindowEncoder`), and its
re-encoded frames are checked on their own too.
"""

from __future__ import annotations

import math

import pytest
import torch

from inferix_core.cache.zero_keys import ZeroKeysView
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline
from inferix_core.scheduler import FlowMatchScheduler
from inferix_core.vae import WanVAE
from inferix_core.vae.pixel_window import PixelWindowEncoder
from tests.fixture_utils import (
    Recorder,
    assert_sigmas_used,
    cache_from_metadata,
    call_frames,
    call_input,
    call_start_frame,
    files_of_kind,
    fixture_header,
    fixture_request,
    fixture_weights,
    has_lora,
    has_switch,
    read_fixture,
    sampling_from_metadata,
)

ATOL = 1e-4
FILES = files_of_kind("causal_wan", lambda info, names: not has_lora(info, names) and not has_switch(info, names))
CALLS = [f for f in FILES if isinstance(fixture_header(f)[0]["trace"].get("calls"), list)]
# Krea with keep_first_frame false re-encodes a decoded frame before each block: it needs the VAE it names
REENCODE = [f for f in FILES if "vae_file" in fixture_header(f)[0]]
# a run that decodes and re-encodes every block (the tiny VAE at 64x64 on CPU) takes ~30 s on 2 loaded cores
RUNS = [pytest.param(f, id=f.name, marks=[pytest.mark.slow] if f in REENCODE else []) for f in FILES]
IDS = [f.name for f in FILES]


def _vae(path, info) -> WanVAE:
    """The tiny Wan VAE the fixture names (a fixture of its own, `weights.*` in the original Wan layout)."""
    vae_path = path.parent / info["vae_file"]
    vae_info, vae_tensors = read_fixture(vae_path)
    return WanVAE.from_state_dict(fixture_weights(vae_path, vae_info, vae_tensors)).eval()


def _first_frame_encoder(path, info) -> PixelWindowEncoder | None:
    p = info["pipeline"]
    if not p.get("do_kv_recomp") or p.get("keep_first_frame", True):
        return None
    if "vae_file" not in info:
        pytest.skip("keep_first_frame false re-encodes decoded frames; the file names no VAE (`vae_file`)")
    return PixelWindowEncoder(_vae(path, info), p["kv_cache_num_frames"])


def _model(path, info, tensors) -> CausalWanTransformer:
    model = CausalWanTransformer(WanConfig.from_dict(info["config"]))
    model.load_state_dict(fixture_weights(path, info, tensors), strict=True)
    return model.eval()


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_timesteps_and_sigmas(path):
    info, t = read_fixture(path)
    p = info["pipeline"]
    sch = FlowMatchScheduler(p["timestep_shift"], p["num_train_timesteps"], p["scheduler"]["num_inference_steps"])
    torch.testing.assert_close(sch.sigmas, t["scheduler.sigmas"], atol=1e-6, rtol=0)
    ts = sch.timesteps_for(p["denoising_step_list"], p["warp_denoising_step"])
    torch.testing.assert_close(ts, t["timesteps_warped" if p["warp_denoising_step"] else "timesteps_used"])
    assert_sigmas_used(sch, ts, p, t["sigmas_used"])


@pytest.mark.parametrize("path", RUNS)
def test_pipeline_parity(path):
    info, t = read_fixture(path)
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(
        _model(path, info, t),
        sampling_from_metadata(p),
        cache_from_metadata(p),
        first_frame_encoder=_first_frame_encoder(path, info),
    )
    rec = Recorder()
    req = fixture_request(p, t)
    latents = pipe.generate(req, rec)
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    for (b, s), x0 in rec.x0.items():
        torch.testing.assert_close(x0, t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
    steps_per_block = [len(p.get("denoising_step_list_first_chunk") or p["denoising_step_list"])]
    steps_per_block += [len(p["denoising_step_list"])] * (p["num_blocks"] - 1)
    assert sorted(rec.x0) == [(b, s) for b, n in enumerate(steps_per_block) for s in range(n)]
    if not p.get("do_kv_recomp"):  # a recompute resets the cache (and its call counter) every block
        assert pipe.kv_cache.num_calls == info["trace"]["model_calls"]


def _zero_keys_attended(frames: int, start: int, block: int, frame_tokens: int) -> int:
    """krea-ai/realtime-video `get_block_mask`: Q/KV right-padded with zeros to a multiple of 128 tokens; a query
    of the block [start, start + block) attends to every key before the block's end, padding included. Written
    here from their code, apart from the engine's own count (cache/zero_keys.py)."""
    real = frames * frame_tokens
    padded = math.ceil(real / 128) * 128
    return max(0, min((start + block) * frame_tokens, padded) - real)


@pytest.mark.parametrize("path", CALLS, ids=[f.name for f in CALLS])
def test_every_denoising_call(path):
    """Each recorded denoising call (its stored input and timestep → flow) through our transformer, within 1e-4.

    Replays the reference's call sequence (`trace.calls`: start frame, frames, timestep) against one of
    our caches, feeding each call's stored input, so a mismatch points at the call that differs.
    """
    info, t = read_fixture(path)
    from inferix_core.cache import KVCacheSpec, create_kv_cache

    p = info["pipeline"]
    B, F, _C, H, W = p["latent_shape"]
    model = _model(path, info, t)
    cfg = model.config
    n = p["num_frame_per_block"]
    calls = info["trace"]["calls"]
    widest = max(call_frames(c, t) for c in calls)
    max_frames = F + (p.get("kv_cache_num_frames") or 0)
    spec = KVCacheSpec(
        cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), widest, B, max_frames=max_frames
    )
    cache = create_kv_cache(cache_from_metadata(p), spec)
    text = model.prepare_context(t["text_context"])
    checked = 0
    with torch.no_grad():
        for call in calls:
            if call.get("reset_before"):
                cache.reset()
            x, ts = call_input(call, t), t[call["label"] + ".timestep"]
            frames, start = call_frames(call, t), call_start_frame(call, p)
            # a KV recompute is one call under a block-causal mask; ours runs it as block-sized context passes
            chunk = n if call.get("recompute") else frames
            flows = []
            for a in range(0, frames, chunk):
                m = min(chunk, frames - a)
                view = cache
                if call.get("recompute"):  # their flex mask lets a block ending past the context see zero keys
                    view = ZeroKeysView(cache, _zero_keys_attended(frames, a, chunk, cfg.frame_tokens(H, W)))
                view.begin(start + a, m)
                xa = x[:, a : a + m].permute(0, 2, 1, 3, 4)
                flows.append(model(xa, ts[:, a : a + m], text, view, start + a).permute(0, 2, 1, 3, 4))
            flow = torch.cat(flows, dim=1)
            torch.testing.assert_close(flow, t[call["label"] + ".flow_pred"], atol=ATOL, rtol=0)
            checked += 1
    assert checked == info["trace"]["model_calls"]


def reencoded_blocks(p: dict) -> list[int]:
    """The blocks whose first frame Krea re-encodes: those starting once the first frame left the window of
    `kv_cache_num_frames` (their `pipeline`); `info.reencode_blocks` where the file states it must agree."""
    n, k = p["num_frame_per_block"], p["kv_cache_num_frames"]
    return [b for b in range(p["num_blocks"]) if (b - 1) * n >= k]


@pytest.mark.slow
@pytest.mark.parametrize("path", REENCODE, ids=[f.name for f in REENCODE])
def test_reencoded_first_frames(path):
    """Krea's keep_first_frame=False: the pixel frame re-encoded before each block, and its latent, within 1e-4.

    Our `PixelWindowEncoder` is fed the reference's clean blocks in order (their decoder's pixels through
    ours in Krea's mode, the window of 1 + 4(K − 1) frames); before each block the reference re-encoded
    (`reencode_blocks`), its oldest frame and that frame's encoding must be theirs.
    """
    info, t = read_fixture(path)
    p = info["pipeline"]
    n, k = p["num_frame_per_block"], p["kv_cache_num_frames"]
    window = _first_frame_encoder(path, info)
    expected = reencoded_blocks(p)
    assert info.get("reencode_blocks", expected) == expected
    if not expected:  # a run too short for its K (README: reencode_blocks []); its generation is checked above
        pytest.skip(f"no block re-encoded: kv_cache_num_frames {k} outlasts {p['num_blocks']} blocks of {n}")
    with torch.no_grad():
        for b in range(p["num_blocks"]):
            if b in expected:
                torch.testing.assert_close(window.frames[0], t[f"block{b}.reencode.pixels"], atol=ATOL, rtol=0)
                latent = window.encode_oldest()
                assert torch.isfinite(latent).all()
                torch.testing.assert_close(latent, t[f"block{b}.reencode.latent"], atol=ATOL, rtol=0)
            window.observe(t["output_latents"][:, b * n : (b + 1) * n])
    assert len(window.frames) == window.max_frames == 1 + 4 * (k - 1)


def test_some_reencode_fixture_rolls_its_window():
    """The re-encode test above checks something: at least one re-encode fixture re-encoded a block."""
    rolled = [path.name for path in REENCODE if reencoded_blocks(read_fixture(path)[0]["pipeline"])]
    assert rolled or not REENCODE, "no re-encode fixture's window ever rolled: the re-encode checks nothing"
