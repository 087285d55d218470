"""LongLive with its LoRA: our loader + engine against the authors' own run (bench/fixtures/gen_longlive.py).

Each `longlive_*.safetensors` holds the base weights and LongLive's trace; `info.lora.file` names the adapter
in LongLive's on-disk format (`{"generator_lora": peft state dict, ...}`), which their code loaded with peft.
Here the same file goes through `load_world_model(..., lora=...)`, and every setting comes from `info`.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.models.lora import read_lora
from inferix_core.models.registry import load_world_model
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from tests.fixture_utils import fixture_files, read_fixture
from tests.pipeline.test_parity import FixtureNoise, Recorder

ATOL = 1e-4
FILES = fixture_files("longlive_*.safetensors")


def settings(info: dict) -> tuple[SamplingConfig, KVCacheConfig]:
    p = info["pipeline"]
    sampling = SamplingConfig(
        denoising_steps=tuple(p["denoising_step_list"]),
        warp_denoising_steps=p["warp_denoising_step"],
        shift=p["timestep_shift"],
        num_train_timesteps=p["num_train_timesteps"],
        block_frames=p["num_frame_per_block"],
        context_noise=p["context_noise"],
        independent_first_frame=p["independent_first_frame"],
    )
    window = p["local_attn_size"]
    return sampling, KVCacheConfig(window_frames=window if window > 0 else -1, sink_frames=p["sink_size"])


def generate(path, lora: bool):
    info, t = read_fixture(path)
    loras = [(str(path.parent / info["lora"]["file"]), 1.0)] if lora else None
    wm = load_world_model(str(path), family="longlive", device="cpu", dtype="fp32", lora=loras)
    sampling, cache = settings(info)
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
        noise=FixtureNoise(t, sampling.block_frames),
    )
    blocks, attended, global_end = [], [], []
    for block in pipe.stream(req, rec):
        blocks.append(block.latents)
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
