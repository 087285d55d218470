"""A LoRA in LongLive 2.0's own format (NVlabs/LongLive main), merged by us = merged by their peft code.

tests/fixtures/longlive2_lora*.safetensors are written by bench/fixtures/gen_longlive2_lora.py: their
`configure_lora_for_model` + `peft.set_peft_model_state_dict` from the adapter file their trainer saves
(`{"generator_lora": ...}`, `info.lora.file` beside the fixture), their `merge_and_unload(safe_merge=True)`
(`merged.*`) and their pipeline run with the LoRA on (`output_latents`). Sizes and settings come from `info`.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inferix_core.cache import KVCacheConfig
from inferix_core.models.lora import merge_loras, read_lora
from inferix_core.models.wan.checkpoint import save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig
from inferix_core.scheduler import FlowUniPCSolver
from tests.fixture_utils import files_of_kind

FIXTURES = files_of_kind("longlive2_lora")


@pytest.fixture(params=FIXTURES, ids=[p.name for p in FIXTURES], scope="module")
def fx(request):
    path = request.param
    info = json.loads(safe_open(str(path), "pt").metadata()["info"])
    t = load_file(str(path))
    part = lambda prefix: {k.removeprefix(prefix): v for k, v in t.items() if k.startswith(prefix)}  # noqa: E731
    return path, info, t, part("weights."), part("merged.")


def test_fixture_present():
    assert FIXTURES, "no tests/fixtures/longlive2_lora*.safetensors; run bench/fixtures/gen_longlive2_lora.py"


def test_their_adapter_file_merges_as_their_peft_merge(fx):
    path, info, _, base, theirs = fx
    lora = read_lora(path.parent / info["lora"]["file"])
    assert lora.scale(next(iter(lora.patches.values()))) == pytest.approx(info["lora"]["scaling"])
    ours = merge_loras(base, [(lora, 1.0)])
    assert ours.keys() == theirs.keys()
    changed = [k for k in ours if not torch.equal(ours[k], base[k])]
    assert sorted(changed) == sorted(info["lora"]["changed_weights"])
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], atol=1e-6, rtol=0, msg=k)


def test_a_run_with_their_lora_matches_their_pipeline(fx, tmp_path):
    """load_world_model(..., lora=[their file]) then the block loop = their pipeline with the LoRA on."""
    from inferix_core.models.registry import load_world_model

    path, info, t, base, _ = fx
    cfg, run = info["config"], info["run"]
    config = WanConfig(**{**cfg, "patch_size": tuple(cfg["patch_size"])})
    save_wan_checkpoint(base, tmp_path / "base.safetensors", "comfyui", config=config)
    wm = load_world_model(
        str(tmp_path / "base.safetensors"), family="longlive2", device="cpu", dtype="fp32",
        num_heads=cfg["num_heads"], lora=[str(path.parent / info["lora"]["file"])],
    )  # fmt: skip
    steps = tuple(int(v) for v in FlowUniPCSolver(run["steps"], shift=run["shift"]).timesteps)
    sampling = SamplingConfig(
        steps, shift=run["shift"], block_frames=run["block_frames"], solver="unipc",
        shot_sinks=run["multi_shot_sink"], shot_rope_offset=run["rope_offset"],
    )  # fmt: skip
    cache = KVCacheConfig(window_frames=run["local_attn_size"], sink_frames=run["sink_size"])
    noise = t["noise"]

    class FixtureNoise:
        def initial(self, start_frame, shape):
            return noise[:, start_frame : start_frame + shape[1]]

    req = GenerationRequest(
        noise.shape[1] // run["block_frames"], noise.shape[3], noise.shape[4], t["prompt.0"].unsqueeze(0),
        noise=FixtureNoise(),
    )  # fmt: skip
    out = BlockDiffusionPipeline(wm.transformer, sampling, cache).generate(req)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, t["output_latents"], atol=1e-4, rtol=0)
