"""LongLive with its LoRA: our loader + engine against the authors' own run (bench/fixtures/gen_longlive.py).

Each `longlive_*.safetensors` holds the base weights (or names them in `weights_file`) and LongLive's trace;
`info.lora.file` names the adapter in LongLive's on-disk format (`{"generator_lora": peft state dict, ...}`),
which their code loaded with peft. Here the same file goes through `load_world_model(..., lora=...)`, and
every setting comes from `info`. Fixtures with `info.switch` are interactive runs with prompt switches and
LongLive's KV re-cache (their `InteractiveCausalInferencePipeline`), replayed through `InteractiveSession`.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from inferix_core.models.lora import read_lora
from inferix_core.models.registry import load_world_model
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from inferix_core.session import InteractiveSession
from tests.fixture_utils import fixture_files, read_fixture, settings_from_metadata
from tests.pipeline.test_parity import FixtureNoise, Recorder

ATOL = 1e-4


def _info(path) -> dict:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["info"])


FILES = [f for f in fixture_files("longlive_*.safetensors") if "switch" not in _info(f)]
SWITCH = [f for f in fixture_files("longlive_*.safetensors") if "switch" in _info(f)]


def world_model(path, info: dict, lora: bool):
    loras = [(str(path.parent / info["lora"]["file"]), 1.0)] if lora else None
    weights = path.parent / info.get("weights_file", path.name)
    return load_world_model(str(weights), family="longlive", device="cpu", dtype="fp32", lora=loras)


def generate(path, lora: bool):
    info, t = read_fixture(path)
    wm = world_model(path, info, lora)
    sampling, cache = settings_from_metadata(info)
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    pipe = BlockDiffusionPipeline(wm.transformer, sampling, cache)
    rec = Recorder()
    req = GenerationRequest(
        num_blocks=p["num_blocks"],
        latent_height=H,
        latent_width=W,
        context=t["text_context"],
        batch_size=B,
        noise=FixtureNoise(t),
    )
    blocks, attended, global_end = [], [], []
    for block in pipe.stream(req, rec):
        blocks.append(block.latents)
        pipe.settle()  # write the block's K/V now (stream() runs its context pass on the next block)
        attended.append(pipe.kv_cache.attended_tokens)
        global_end.append(pipe.kv_cache.end_frame * pipe.kv_cache.spec.frame_tokens)
    return info, t, torch.cat(blocks, dim=1), rec, pipe, attended, global_end


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_lora_file_is_the_authors_format(path):
    info, t = read_fixture(path)
    raw = torch.load(path.parent / info["lora"]["file"], map_location="cpu", weights_only=True)
    assert info["lora"]["container_key"] in raw
    stored = raw[info["lora"]["container_key"]]
    assert {f"lora.{k}" for k in stored} == {k for k in t if k.startswith("lora.")}
    for k, v in stored.items():
        assert torch.equal(v.float(), t[f"lora.{k}"]), k
    lora = read_lora(path.parent / info["lora"]["file"])
    assert lora.format == "peft" and lora.container_key == info["lora"]["container_key"]
    assert {p.rank for p in lora.patches.values()} == {info["lora"]["rank"]}
    assert all(lora.scale(p) == info["lora"]["scaling"] for p in lora.patches.values())
    targets = {m.removeprefix("base_model.model.") for m in lora.patches}
    assert targets == set(info["lora"]["target_modules"])


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_longlive_with_its_lora_matches_the_authors_run(path):
    info, t, latents, rec, pipe, attended, global_end = generate(path, lora=True)
    assert torch.isfinite(latents).all()
    # the LoRA matters far beyond the tolerance, so merging it wrong (or not at all) fails
    assert (t["output_latents"] - t["output_latents_without_lora"]).abs().max() > 100 * ATOL
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    p = info["pipeline"]
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
    tr = info["trace"]
    assert attended == tr["local_end_after_block_layer0"]
    assert global_end == tr["global_end_after_block_layer0"]
    assert pipe.kv_cache.num_eviction_events == tr["evictions_per_layer"]
    assert pipe.kv_cache.num_calls == tr["model_calls"]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_longlive_base_alone_matches_the_authors_run(path):
    _info, t, latents, *_ = generate(path, lora=False)
    torch.testing.assert_close(latents, t["output_latents_without_lora"], atol=ATOL, rtol=0)


def replay_session(path, recache_style: str | None = None):
    """Their interactive run through our InteractiveSession: same noise, prompts switched at the same blocks."""
    info, t = read_fixture(path)
    sampling, cache = settings_from_metadata(info)
    p, sw = info["pipeline"], info["switch"]
    _B, _F, _C, H, W = p["latent_shape"]
    wm = world_model(path, info, lora=True)
    names = sw["prompts"]
    session = InteractiveSession(
        wm, names[0], width=8 * W, height=8 * H, cache=cache, sampling=sampling, decode=False,
        prompt_encoder=lambda name: t[name], recache_style=recache_style,
    )  # fmt: skip
    session.state.noise = FixtureNoise(t)
    out, switches = [], iter(names[1:])
    for b in range(p["num_blocks"]):
        if b in sw["switch_block_indices"]:
            session.switch_prompt(next(switches))
        out.append(session.step().latents)
    return info, t, session, torch.cat(out, dim=1)


@pytest.mark.parametrize("path", SWITCH, ids=[f.name for f in SWITCH])
def test_prompt_switch_with_kv_recache_matches_the_authors_run(path):
    info, t, session, latents = replay_session(path)
    assert session.recache_style == "window"  # the longlive family's default: their algorithm
    assert session.num_recaches == len(info["switch"]["switch_block_indices"])
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    assert session.state.cache.num_eviction_events == info["trace"]["evictions_per_layer"]


@pytest.mark.parametrize("path", SWITCH, ids=[f.name for f in SWITCH])
def test_the_recache_style_matters_on_this_fixture(path):
    """Re-running every resident block causally (the other style) lands far from their output: the test above
    can tell the two apart."""
    _, t, _, latents = replay_session(path, recache_style="blocks")
    assert (latents - t["output_latents"]).abs().max() > 100 * ATOL


@pytest.mark.parametrize("path", SWITCH, ids=[f.name for f in SWITCH])
def test_prompt_schedule_with_recache_matches_the_authors_run(path):
    """The same run as a finite request (Block Denoise / generate_video with a prompt schedule)."""
    info, t = read_fixture(path)
    sampling, cache = settings_from_metadata(info)
    p, sw = info["pipeline"], info["switch"]
    B, _F, _C, H, W = p["latent_shape"]
    pipe = BlockDiffusionPipeline(world_model(path, info, lora=True).transformer, sampling, cache)
    schedule = [(b, t[name]) for b, name in zip(sw["switch_block_indices"], sw["prompts"][1:], strict=True)]
    req = GenerationRequest(
        num_blocks=p["num_blocks"], latent_height=H, latent_width=W, context=t[sw["prompts"][0]], batch_size=B,
        noise=FixtureNoise(t), prompt_schedule=schedule, recache_on_switch=True,
    )  # fmt: skip
    latents = pipe.generate(req)
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    assert pipe.kv_cache.num_calls == info["trace"]["model_calls"]  # the re-cache calls included
