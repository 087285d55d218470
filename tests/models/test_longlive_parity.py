"""LongLive with its LoRA: our loader + engine against the authors' own run (README_families.md).

Each LoRA run (found by content: `lora.*` tensors) holds the base weights (or names them in `weights_file`),
the adapter as `lora.<peft key>` and `info.lora` (rank, alpha, container_key, target_modules). The test writes
the adapter as the authors ship it (`{container_key: peft state dict}` in a .pt, peft's adapter_config.json
beside for the alpha), loads it with `load_world_model(..., lora=...)`, and takes every setting from `info`.
Fixtures with `info.switch` are interactive runs with prompt switches and LongLive's KV re-cache (their
`InteractiveCausalInferencePipeline`), replayed through `InteractiveSession`.
"""

from __future__ import annotations

import json

import pytest
import torch

from inferix_core.clients.session import InteractiveSession
from inferix_core.models.lora import read_lora
from inferix_core.models.registry import load_world_model
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from tests.fixture_utils import (
    files_of_kind,
    fixture_header,
    fixture_request,
    has_lora,
    has_switch,
    read_fixture,
    settings_from_metadata,
    switch_prompts,
)
from tests.pipeline.test_parity import FixtureNoise, Recorder

ATOL = 1e-4
FILES = files_of_kind("causal_wan", lambda info, names: has_lora(info, names) and not has_switch(info, names))
SWITCH = files_of_kind("causal_wan", has_switch)


def lora_tensors(path, info: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    """(info.lora, {peft key: tensor}) of a run: its own `lora.*`, else those of its `weights_file`."""
    _, t = read_fixture(path)
    if not any(k.startswith("lora.") for k in t) and "weights_file" in info:
        base = path.parent / info["weights_file"]
        info, t = fixture_header(base)[0], read_fixture(base)[1]
    return info.get("lora", {}), {k[len("lora.") :]: v for k, v in t.items() if k.startswith("lora.")}


def write_authors_lora(path, info: dict, folder) -> str | None:
    """The run's adapter as LongLive ships it: `{container_key: peft state dict}` (+ peft's adapter_config.json)."""
    meta, tensors = lora_tensors(path, info)
    if not tensors:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "lora.pt"
    torch.save({meta.get("container_key", "generator_lora"): tensors}, out)
    if "alpha" in meta:
        rank = meta.get("rank", next(v.shape[0] for k, v in tensors.items() if "lora_A" in k))
        cfg = {"r": rank, "lora_alpha": meta["alpha"], "use_rslora": False}
        (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return str(out)


def world_model(path, info: dict, lora: bool, folder):
    adapter = write_authors_lora(path, info, folder / "lora") if lora else None
    weights = path.parent / info.get("weights_file", path.name)
    return load_world_model(
        str(weights), family="longlive", device="cpu", dtype="fp32", lora=[(adapter, 1.0)] if adapter else None
    )


def generate(path, lora: bool, folder):
    info, t = read_fixture(path)
    wm = world_model(path, info, lora, folder)
    sampling, cache = settings_from_metadata(info)
    p = info["pipeline"]
    pipe = BlockDiffusionPipeline(wm.transformer, sampling, cache)
    rec = Recorder()
    req = fixture_request(p, t)
    blocks, attended, global_end = [], [], []
    for block in pipe.stream(req, rec):
        blocks.append(block.latents)
        pipe.settle()  # write the block's K/V now (stream() runs its context pass on the next block)
        attended.append(pipe.kv_cache.attended_tokens)
        global_end.append(pipe.kv_cache.end_frame * pipe.kv_cache.spec.frame_tokens)
    return info, t, torch.cat(blocks, dim=1), rec, pipe, attended, global_end


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_lora_reads_in_the_authors_format(path, tmp_path):
    """The adapter written as LongLive's lora.pt reads back as peft LoRA of the run's rank and scaling, on the
    modules its tensors name, each of which `target_modules` covers (peft matches a name or a name suffix)."""
    info, t = read_fixture(path)
    lora = read_lora(write_authors_lora(path, info, tmp_path))
    meta = info["lora"]
    assert lora.format == "peft" and lora.container_key == meta.get("container_key", "generator_lora")
    assert {p.rank for p in lora.patches.values()} == {meta["rank"]}
    scaling = meta.get("scaling", meta["alpha"] / meta["rank"])
    assert all(lora.scale(p) == pytest.approx(scaling) for p in lora.patches.values())
    named = {k[len("lora.") :].rsplit(".lora_", 1)[0] for k in t if k.startswith("lora.")}
    assert set(lora.patches) == named or {m.removeprefix("base_model.model.") for m in lora.patches} == {
        m.removeprefix("base_model.model.") for m in named
    }
    targets = meta.get("target_modules") or []
    for m in named:
        m = m.removeprefix("base_model.model.")
        assert not targets or any(m == x or m.endswith("." + x) for x in targets), (m, targets)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_longlive_with_its_lora_matches_the_authors_run(path, tmp_path):
    info, t, latents, rec, pipe, attended, global_end = generate(path, lora=True, folder=tmp_path)
    assert torch.isfinite(latents).all()
    # the LoRA matters far beyond the tolerance, so merging it wrong (or not at all) fails
    if "output_latents_without_lora" in t:
        assert (t["output_latents"] - t["output_latents_without_lora"]).abs().max() > 100 * ATOL
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    p = info["pipeline"]
    for b in range(p["num_blocks"]):
        for s in range(len(p["denoising_step_list"])):
            torch.testing.assert_close(rec.x0[(b, s)], t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
    tr = info["trace"]  # what the generator recorded is checked; a key it did not write is not
    for key, ours in (("local_end_after_block_layer0", attended), ("global_end_after_block_layer0", global_end),
                      ("evictions_per_layer", pipe.kv_cache.num_eviction_events),
                      ("model_calls", pipe.kv_cache.num_calls)):  # fmt: skip
        if key in tr:
            assert ours == tr[key], key


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_longlive_base_alone_matches_the_authors_run(path, tmp_path):
    if "output_latents_without_lora" not in read_fixture(path)[1]:
        pytest.skip("no output_latents_without_lora in this run")
    _info, t, latents, *_ = generate(path, lora=False, folder=tmp_path)
    torch.testing.assert_close(latents, t["output_latents_without_lora"], atol=ATOL, rtol=0)


def their_style(info: dict) -> str:
    """The re-cache their run used: `pipeline.global_sink` (README_families.md; absent: true, as their released
    inference configs set it) true → "window", false → "window_reset" (docs/longlive_global_sink.md)."""
    return "window" if info["pipeline"].get("global_sink", True) else "window_reset"


def replay_session(path, folder, recache_style: str | None = None):
    """Their interactive run through our InteractiveSession: same noise, prompts switched at the same blocks."""
    info, t = read_fixture(path)
    sampling, cache = settings_from_metadata(info)
    p, sw = info["pipeline"], info["switch"]
    _B, _F, _C, H, W = p["latent_shape"]
    wm = world_model(path, info, lora=True, folder=folder)
    names = switch_prompts(info, t)
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
def test_prompt_switch_with_kv_recache_matches_the_authors_run(path, tmp_path):
    info, _ = read_fixture(path)
    info, t, session, latents = replay_session(path, tmp_path, recache_style=their_style(info))
    assert session.num_recaches == len(info["switch"]["switch_block_indices"])
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    if "evictions_per_layer" in info["trace"]:
        assert session.state.cache.num_eviction_events == info["trace"]["evictions_per_layer"]


@pytest.mark.parametrize("path", SWITCH, ids=[f.name for f in SWITCH])
def test_the_recache_style_matters_on_this_fixture(path, tmp_path):
    """Re-running every resident block causally (the other style) lands far from their output: the test above
    can tell the two apart. "Far" is measured in the parity tolerance: 10 × ATOL leaves the parity test an order
    of magnitude between a right and a wrong recache (how far the styles part depends on the fixture's sizes
    and seed: 0.0097 on a 2-head, 3-layer held-out file, 100 × ATOL and more on the shipped one).

    A run whose every switch follows its first block has one resident block to re-cache: both styles are then
    one context pass over that block, the same computation, and must agree within the parity tolerance."""
    info, t, _, latents = replay_session(path, tmp_path, recache_style="blocks")
    gap = (latents - t["output_latents"]).abs().max()
    if all(b == 1 for b in info["switch"]["switch_block_indices"]):
        assert gap <= ATOL
    else:
        assert gap > 10 * ATOL


def schedule_run(path, folder, recache_style: str):
    """Their interactive run as one finite request (Block Denoise / generate_video with a prompt schedule):
    (info, tensors, the pipeline after the run, its latents)."""
    info, t = read_fixture(path)
    sampling, cache = settings_from_metadata(info)
    p, sw = info["pipeline"], info["switch"]
    B, _F, _C, H, W = p["latent_shape"]
    pipe = BlockDiffusionPipeline(world_model(path, info, lora=True, folder=folder).transformer, sampling, cache)
    prompts = switch_prompts(info, t)
    # `switch_frame_indices` may name switches past the run's end; `switch_block_indices` are those that happened
    happened = prompts[1 : 1 + len(sw["switch_block_indices"])]
    schedule = [(b, t[name]) for b, name in zip(sw["switch_block_indices"], happened, strict=True)]
    req = GenerationRequest(
        num_blocks=p["num_blocks"], latent_height=H, latent_width=W, context=t[prompts[0]], batch_size=B,
        noise=FixtureNoise(t), prompt_schedule=schedule, recache_on_switch=True, recache_style=recache_style,
    )  # fmt: skip
    return info, t, pipe, pipe.generate(req)


@pytest.mark.parametrize("path", SWITCH, ids=[f.name for f in SWITCH])
def test_prompt_schedule_with_recache_matches_the_authors_run(path, tmp_path):
    """The same run as a finite request (Block Denoise / generate_video with a prompt schedule)."""
    info, _ = read_fixture(path)
    info, t, pipe, latents = schedule_run(path, tmp_path, their_style(info))
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    assert pipe.kv_cache.num_calls == info["trace"]["model_calls"]  # the re-cache calls included
