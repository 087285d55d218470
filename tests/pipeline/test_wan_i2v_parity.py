"""Wan 2.1 I2V (text + start image + CLIP vision) against the authors' Wan 2.1 code, on a tiny model.

Every `wan_i2v_*.safetensors` in tests/fixtures (written by bench/fixtures/gen_wan_i2v.py from Wan 2.1's
`WanModel`/`WanI2VCrossAttention` and Self-Forcing's `CausalWanModel` + `CausalInferencePipeline`) is found by
glob and run from its `info` metadata alone: one I2V cross-attention call, a bidirectional full-model forward,
every causal model call replayed against our KV cache, and the whole block loop, all within 1e-4.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheSpec, create_kv_cache
from inferix_core.models.wan.block_inputs import StartImageBlockInput, StartImageConditioning
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
from tests.fixture_utils import (
    FixtureNoise,
    Recorder,
    files_of_kind,
    fixture_weights,
    read_fixture,
)
from tests.fixture_utils import (
    cache_from_metadata as cache_from,
)
from tests.fixture_utils import (
    sampling_from_metadata as sampling_from,
)

ATOL = 1e-4
FILES = files_of_kind("wan_i2v")
IDS = [f.name for f in FILES]
pytestmark = pytest.mark.skipif(not FILES, reason="no wan_i2v_*.safetensors in tests/fixtures")


def _model(path):
    info, t = read_fixture(path)
    model = CausalWanTransformer(WanConfig.from_dict(info["config"]))
    model.load_state_dict(fixture_weights(path, info, t), strict=True)
    return info, t, model.eval()


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_config_is_wan_i2v(path):
    _, _, model = _model(path)
    cfg = model.config
    assert cfg.model_type == "i2v" and cfg.has_image_input and cfg.in_dim == 2 * cfg.out_dim + 4
    assert not cfg.image_context and cfg.context_dim == cfg.text_dim  # the prompt is the context, the image beside it
    assert all(hasattr(b.cross_attn, "k_img") for b in model.blocks) and hasattr(model, "text_embedding")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_cross_attention_alone(path):
    """One WanI2VCrossAttention call: [img_emb(clip) ; text_embedding(text)] → text attention + image attention."""
    info, t, model = _model(path)
    block = info["cross_attention"]["block"]
    with torch.no_grad():
        ctx = model.prepare_context(t["text_context"], t["clip_tokens"])
        out = model.blocks[block].cross_attn(
            t["cross_attn.x"], ctx.keys[block], ctx.values[block], ctx.image_keys[block], ctx.image_values[block]
        )
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, t["cross_attn.output"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_full_model_forward(path):
    """The authors' bidirectional WanModel forward: our transformer with no cache and no mask attends the same."""
    info, t, model = _model(path)
    frames = info["full_forward"]["frames"]
    x = t["full.input"]
    timestep = t["full.timestep"].expand(x.shape[0], frames)  # one timestep for every frame, as WanModel takes it
    with torch.no_grad():
        ctx = model.prepare_context(t["text_context"], t["clip_tokens"])
        flow = model(x, timestep, ctx, None, 0, StartImageBlockInput(t["cond_concat"][:, :, :frames]))
    torch.testing.assert_close(flow, t["full.flow_pred"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_model_call(path):
    """Each recorded causal call (stored input → flow) against one of our caches, context passes included."""
    info, t, model = _model(path)
    p = info["pipeline"]
    B, F, _C, H, W = p["latent_shape"]
    cfg = model.config
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(H, W), p["num_frame_per_block"],
                       B, max_frames=F)  # fmt: skip
    cache = create_kv_cache(cache_from(p), spec)
    cond = StartImageConditioning(t["cond_concat"])
    with torch.no_grad():
        ctx = model.prepare_context(t["text_context"], t["clip_tokens"])
        for call in info["trace"]["calls"]:
            label, start, n = call["label"], call["start_frame"], call["frames"]
            cache.begin(start, n)
            x = t[f"{label}.input"].permute(0, 2, 1, 3, 4)
            flow = model(x, t[f"{label}.timestep"], ctx, cache, start, cond.for_block(start, n))
            torch.testing.assert_close(flow.permute(0, 2, 1, 3, 4), t[f"{label}.flow_pred"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_pipeline_parity(path):
    """The whole causal run through BlockDiffusionPipeline: prompt as context, CLIP tokens beside it, cond_concat per block."""
    info, t, model = _model(path)
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    pipe = BlockDiffusionPipeline(model, sampling_from(p), cache_from(p))
    rec = Recorder()
    req = GenerationRequest(
        num_blocks=p["num_blocks"], latent_height=H, latent_width=W, context=t["text_context"], batch_size=B,
        noise=FixtureNoise(t), image_context=t["clip_tokens"], actions=StartImageConditioning(t["cond_concat"]),
    )  # fmt: skip
    latents = pipe.generate(req, rec)
    assert torch.isfinite(latents).all()
    torch.testing.assert_close(latents, t["output_latents"], atol=ATOL, rtol=0)
    for (b, s), x0 in rec.x0.items():
        torch.testing.assert_close(x0, t[f"block{b}.step{s}.x0_pred"], atol=ATOL, rtol=0)
    assert len(rec.x0) == p["num_blocks"] * len(p["denoising_step_list"])
    assert pipe.kv_cache.num_calls == info["trace"]["model_calls"]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_the_image_and_the_prompt_both_steer(path):
    """Another image or another prompt changes the output (neither attention is dead; cross-attention has no
    positions, so a token permutation would not), and a prompt switch keeps the image's K/V."""
    info, t, model = _model(path)
    p = info["pipeline"]
    x = t["block0.step0.input"].permute(0, 2, 1, 3, 4)
    ts, cond = t["block0.step0.timestep"], StartImageConditioning(t["cond_concat"]).for_block(0, x.shape[2])
    with torch.no_grad():
        base = model(x, ts, model.prepare_context(t["text_context"], t["clip_tokens"]), None, 0, cond)
        other_image = model(x, ts, model.prepare_context(t["text_context"], -t["clip_tokens"]), None, 0, cond)
        first = model.prepare_context(t["text_context"], t["clip_tokens"])
        switched = model.prepare_context(-t["text_context"], keep_image_of=first)
        other_prompt = model(x, ts, switched, None, 0, cond)
    assert switched.image_keys is first.image_keys
    assert (base - other_image).abs().max() > 1e-3 and (base - other_prompt).abs().max() > 1e-3
    with pytest.raises(Exception, match="CLIP vision tokens"):
        model.prepare_context(t["text_context"])
    assert p["num_blocks"] >= 1


@pytest.mark.cuda
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_pipeline_parity_on_cuda(path):
    """The same run on the GPU: fp32 (TF32 off) within 1e-4 of the authors', bf16 within bf16 tolerance of it."""
    info, t, model = _model(path)
    p = info["pipeline"]
    B, _F, _C, H, W = p["latent_shape"]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    scale = float(t["output_latents"].abs().max())
    for dtype, tol in ((torch.float32, ATOL), (torch.bfloat16, 0.1 * scale)):  # bf16: 10 % of the output range
        m = model.to("cuda", dtype)
        req = GenerationRequest(
            num_blocks=p["num_blocks"], latent_height=H, latent_width=W, context=t["text_context"].to(dtype),
            batch_size=B, noise=FixtureNoise(t), image_context=t["clip_tokens"].to(dtype),
            actions=StartImageConditioning(t["cond_concat"].to(dtype)),
        )  # fmt: skip
        out = BlockDiffusionPipeline(m, sampling_from(p), cache_from(p)).generate(req).float().cpu()
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, t["output_latents"], atol=tol, rtol=0)
