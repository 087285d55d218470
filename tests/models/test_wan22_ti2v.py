"""The Wan 2.2 TI2V-5B transformer: its config read from the weights, and Wan2.2's own forward with per-token
timesteps (frame 0 clean at t = 0) reproduced by our per-frame timesteps (tests/fixtures/wan22_ti2v*.safetensors,
written by bench/fixtures/gen_wan22_ti2v.py). Sizes come from the fixture metadata."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.checkpoint import load_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.shapes import expected_wan_shapes, infer_wan_config
from inferix_core.pipeline.block_diffusion import SeededNoise
from tests.fixture_utils import files_of_kind

FIXTURES = files_of_kind("wan22_ti2v")
ATOL = 1e-4


@pytest.fixture(params=FIXTURES, ids=[p.name for p in FIXTURES], scope="module")
def fx(request):
    path = request.param
    info = json.loads(safe_open(str(path), "pt").metadata()["info"])
    sd, cfg, _ = load_wan_checkpoint(path)
    model = CausalWanTransformer(cfg).eval()
    model.load_state_dict(sd)
    return path, info, load_file(str(path)), model


def test_fixture_present():
    assert FIXTURES, "no tests/fixtures/wan22_ti2v*.safetensors; run bench/fixtures/gen_wan22_ti2v.py"


def test_config_read_from_weights(fx):
    _, info, _, model = fx
    c, want = model.config, info["config"]
    assert (c.in_dim, c.out_dim, c.dim, c.ffn_dim, c.freq_dim, c.text_dim, c.num_layers, c.num_heads) == (
        want["in_dim"], want["out_dim"], want["dim"], want["ffn_dim"], want["freq_dim"], want["text_dim"],
        want["num_layers"], want["num_heads"],
    )  # fmt: skip
    assert list(c.patch_size) == want["patch_size"]


@pytest.mark.parametrize("case", ["t2v", "ti2v"])
def test_forward_matches_wan22(fx, case):
    """One chunk without a cache is WanModel's full attention; per-frame t (frame 0 at 0) = their per-token t."""
    _, info, t, model = fx
    frames = info["latent_shape"][2]
    if case == "t2v":
        timestep = torch.full((1, frames), float(info["timestep"]))
    else:
        timestep = t["timestep_per_frame"]
        per_token = t["timestep_per_token"].reshape(1, frames, -1)  # (f, h·w) order, as patchified
        assert torch.equal(per_token, timestep[:, :, None].expand_as(per_token))  # constant per frame
        assert (timestep[:, : info["clean_first_frames"]] == 0).all()
    with torch.no_grad():
        flow = model(t["x"], timestep, t["context"].unsqueeze(0))
    assert torch.isfinite(flow).all()
    torch.testing.assert_close(flow, t[f"flow_{case}"], atol=ATOL, rtol=0)


def test_ti2v_5b_config_is_inferred_from_its_shapes():
    """The released TI2V-5B sizes (meta shapes only, nothing allocated): 3072 wide, 24 heads of 128, 30 layers."""
    cfg = WanConfig("ti2v", in_dim=48, out_dim=48, dim=3072, ffn_dim=14336, num_heads=24, num_layers=30)
    got = infer_wan_config(expected_wan_shapes(cfg))
    assert got == cfg and got.head_dim == 128 and got.model_type == "ti2v"
    assert 4.9e9 < got.num_parameters() < 5.1e9
    assert got.frame_tokens(44, 80) == 880  # 704x1280 through the 16x VAE: 44x80 latents, 880 tokens per frame


def test_safetensors_whose_header_length_starts_with_0x80_is_not_taken_for_a_pickle(fx):
    """Regression: a header of 0x..80 bytes made the first byte 0x80 (a legacy pickle's) and lost the metadata."""
    from inferix_core.models.wan.checkpoint import CONTAINER_KEYS
    from inferix_core.models.wan.sources import SafetensorsSource, open_tensor_source

    path = fx[0]
    src = open_tensor_source(path, CONTAINER_KEYS)
    assert isinstance(src, SafetensorsSource) and "info" in src.metadata


def test_memory_planner_knows_the_5b_sizes():
    """Weights, KV cache (880 tokens per frame, 24 heads of 128) and the Wan 2.2 VAE estimate at 704x1280."""
    from inferix_core.cache import KVCacheConfig, plan_memory
    from inferix_core.clients.benchmark import PRESETS
    from inferix_core.vae import Wan22VAE, Wan22VAEConfig
    from inferix_core.vae.config import WAN22_VAE_PARAMETERS
    from inferix_core.vae.cost import estimated_vae_bytes

    p = PRESETS["wan-5b"]
    cfg, h, w, n = p["config"], p["latent_height"], p["latent_width"], p["block_frames"]
    plan = plan_memory(cfg, h, w, KVCacheConfig(window_frames=32, sink_frames=8), block_frames=n, dtype=torch.bfloat16)
    assert plan.weights_bytes == cfg.num_parameters() * 2
    assert plan.requested_cache.device_bytes == 2 * 30 * 32 * 880 * 3072 * 2  # K and V, layers, frames, tokens, dim
    assert plan.vae_bytes == estimated_vae_bytes(48, h, w, n, 1, 2)
    assert plan.vae_bytes > WAN22_VAE_PARAMETERS * 2  # the Wan 2.2 VAE's weights (705M), not the Wan 2.1 VAE's
    with torch.device("meta"):
        vae = Wan22VAE(Wan22VAEConfig()).to(torch.bfloat16)
    weights = sum(q.numel() for q in vae.parameters()) * 2
    assert weights + vae.decode_working_set_bytes(h, w, n) == plan.vae_bytes  # the same numbers with the VAE at hand


def _pipeline(model, block_frames: int):
    from inferix_core.cache import KVCacheConfig
    from inferix_core.pipeline import BlockDiffusionPipeline, SamplingConfig

    return BlockDiffusionPipeline(model, SamplingConfig(block_frames=block_frames), KVCacheConfig())


def test_clean_first_latent_block_equals_the_ti2v_loop_written_out(fx):
    """Image start (Wan 2.2 TI2V / LongLive 2.0 I2V): frame 0 of block 0 is held clean at t = 0.

    The first block has no history, so it equals the few-step loop written out against the model alone:
    x[:, 0] = image latent, per-frame t with frame 0 at 0, x0 = x − σ·flow, x0[:, 0] = image latent, re-noise.
    """
    from inferix_core.pipeline import GenerationRequest, SeededNoise

    _, info, t, model = fx
    _, c, frames, h, w = info["latent_shape"]
    pipe = _pipeline(model, frames)
    ctx = t["context"].unsqueeze(0)
    image = torch.randn(1, 1, c, h, w, generator=torch.Generator().manual_seed(5))
    req = GenerationRequest(2, h, w, ctx, seed=3, clean_first_latents=image)
    out = pipe.generate(req)
    assert torch.equal(out[:, :1], image)  # held clean exactly
    noise = SeededNoise(3, total_shape=(1, 2 * frames, c, h, w))
    x = noise.initial(0, (1, frames, c, h, w)).clone()
    with torch.no_grad():
        for s, step_t in enumerate(pipe.timesteps.tolist()):
            x[:, :1] = image
            timestep = torch.full((1, frames), step_t)
            timestep[:, 0] = 0
            flow = model(x.permute(0, 2, 1, 3, 4), timestep, ctx).permute(0, 2, 1, 3, 4)
            x0 = pipe.scheduler.to_x0(flow, x, pipe.sigmas[s])
            x0[:, :1] = image
            if s + 1 < len(pipe.sigmas):
                x = pipe.scheduler.add_noise(x0, noise.step(0, s + 1, x.shape), pipe.sigmas[s + 1])
    torch.testing.assert_close(out[:, :frames], x0, atol=1e-5, rtol=0)
    plain = pipe.generate(GenerationRequest(2, h, w, ctx, seed=3))
    assert (plain[:, frames:] - out[:, frames:]).abs().max() > 1e-3  # the image conditions the next block too


def test_clean_first_latents_are_checked(fx):
    from inferix_core.errors import ConfigError, ShapeMismatchError
    from inferix_core.pipeline import GenerationRequest

    _, info, t, model = fx
    _, c, frames, h, w = info["latent_shape"]
    pipe, ctx = _pipeline(model, frames), t["context"].unsqueeze(0)
    with pytest.raises(ShapeMismatchError, match="clean_first_latents"):
        pipe.generate(GenerationRequest(1, h, w, ctx, clean_first_latents=torch.randn(1, 1, c + 1, h, w)))
    with pytest.raises(ConfigError, match=f"1..{frames - 1}"):
        pipe.generate(GenerationRequest(1, h, w, ctx, clean_first_latents=torch.randn(1, frames, c, h, w)))


def test_world_model_with_the_wan22_vae_starts_from_an_image(fx, tmp_path):
    """load_world_model pairs a 48-channel transformer with the Wan 2.2 VAE (refusing the 2.1 one), and an
    image encoded by it, held clean as the first latent, decodes back through the streaming decoder."""
    from inferix_core.errors import ConfigError
    from inferix_core.models.registry import load_world_model
    from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
    from inferix_core.vae import Wan22VAE

    path, info, t, _ = fx
    fixtures = path.parent
    vae_files = sorted(fixtures.glob("wan22_vae*.safetensors"))
    if not vae_files:
        pytest.skip("no Wan 2.2 VAE fixture")
    wm = load_world_model(str(path), vae_path=str(vae_files[0]), device="cpu", dtype="fp32")
    assert isinstance(wm.vae, Wan22VAE) and wm.spatial_compression == 16
    assert wm.family == "longlive2"  # 48-channel weights with no family in the file name
    for other in sorted(fixtures.glob("wan_vae_*.safetensors")):
        with pytest.raises(ConfigError, match=rf"{info['config']['in_dim']} latent channels.*Wan 2\.2 VAE"):
            load_world_model(str(path), vae_path=str(other), device="cpu", dtype="fp32")
    _, _, frames, h, w = info["latent_shape"]
    s = wm.spatial_compression
    image = torch.rand(1, 3, 1, h * s, w * s, generator=torch.Generator().manual_seed(0)) * 2 - 1
    first = wm.vae.encode(image).permute(0, 2, 1, 3, 4)  # (1, 1, C, h, w) normalised
    pipe = BlockDiffusionPipeline(
        wm.transformer, dataclasses.replace(wm.sampling, block_frames=frames), wm.default_cache
    )
    req = GenerationRequest(2, h, w, t["context"].unsqueeze(0), clean_first_latents=first)
    decoder = wm.vae.stream_decoder()
    pixels = [decoder.decode(out.latents.permute(0, 2, 1, 3, 4)) for out in pipe.stream(req)]
    video = torch.cat(pixels, 2)
    assert video.shape == (1, 3, wm.vae.config.num_frames(2 * frames), h * s, w * s) and torch.isfinite(video).all()
    torch.testing.assert_close(video[:, :, :1], wm.vae.decode(first.permute(0, 2, 1, 3, 4)), atol=1e-5, rtol=0)


def test_unipc_block_with_a_clean_first_latent_equals_the_loop_written_out(fx):
    """solver="unipc" (LongLive 2.0): per block a fresh UniPC solve; with an image, frame 0 held clean at t = 0
    before every call and after every step, as the authors' pipeline does for its first I2V chunk."""
    from inferix_core.cache import KVCacheConfig
    from inferix_core.errors import ConfigError
    from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig, SeededNoise
    from inferix_core.scheduler import FlowUniPCSolver

    _, info, t, model = fx
    _, c, frames, h, w = info["latent_shape"]
    steps = tuple(int(v) for v in FlowUniPCSolver(4, shift=5.0).timesteps)
    sampling = SamplingConfig(steps, shift=5.0, block_frames=frames, solver="unipc")
    pipe = BlockDiffusionPipeline(model, sampling, KVCacheConfig())
    ctx = t["context"].unsqueeze(0)
    image = torch.randn(1, 1, c, h, w, generator=torch.Generator().manual_seed(5))
    out = pipe.generate(GenerationRequest(2, h, w, ctx, seed=3, clean_first_latents=image))
    assert torch.equal(out[:, :1], image)
    solver = FlowUniPCSolver(4, shift=5.0)
    x = SeededNoise(3, total_shape=(1, 2 * frames, c, h, w)).initial(0, (1, frames, c, h, w)).clone()
    with torch.no_grad():
        for step_t in solver.timesteps.tolist():
            x[:, :1] = image
            timestep = torch.full((1, frames), float(step_t))
            timestep[:, 0] = 0
            x, _ = solver.step(model(x.permute(0, 2, 1, 3, 4), timestep, ctx).permute(0, 2, 1, 3, 4), x)
            x[:, :1] = image
    torch.testing.assert_close(out[:, :frames], x, atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match=r"UniPC.*999"):
        BlockDiffusionPipeline(model, SamplingConfig((1000, 750, 500, 250), solver="unipc"), KVCacheConfig())


def test_longlive2_family_is_picked_for_a_ti2v_longlive_file_and_runs_from_an_image(fx, tmp_path):
    """A LongLive file with Wan 2.2 (48-channel) weights gets the longlive2 family (UniPC 4 steps, shift 5, 8-frame
    blocks, window 32 / sink 8, as configs/inference.yaml); one start image becomes the clean first latent."""
    import shutil

    import numpy as np

    from inferix_core.api import generate_video
    from inferix_core.models.registry import get_family, load_world_model
    from inferix_core.scheduler import FlowUniPCSolver

    fam = get_family("longlive2")
    assert fam.sampling.solver == "unipc" and fam.sampling.block_frames == 8 and fam.sampling.shift == 5.0
    assert fam.sampling.denoising_steps == tuple(int(t) for t in FlowUniPCSolver(4, shift=5.0).timesteps)
    assert (fam.cache.window_frames, fam.cache.sink_frames) == (32, 8)
    path, info, t, _ = fx
    vae_files = sorted(path.parent.glob("wan22_vae*.safetensors"))
    if not vae_files:
        pytest.skip("no Wan 2.2 VAE fixture")
    named = tmp_path / "LongLive-2.0-5B_tiny.safetensors"
    shutil.copy(path, named)
    wm = load_world_model(str(named), vae_path=str(vae_files[0]), device="cpu", dtype="fp32")
    assert wm.family == "longlive2"
    frames, (h, w) = info["latent_shape"][2], info["latent_shape"][3:]
    sampling = dataclasses.replace(wm.sampling, block_frames=frames)
    s = wm.spatial_compression
    image = np.random.default_rng(0).integers(0, 256, (1, h * s, w * s, 3), dtype=np.uint8)
    ctx = t["context"].unsqueeze(0)
    res = generate_video(wm, ctx, num_blocks=2, width=w * s, height=h * s, sampling=sampling, start_frames=image)
    assert res.frames.shape == (wm.vae.config.num_frames(2 * frames), h * s, w * s, 3)
    first = wm.vae.encode(torch.from_numpy(image).float().div(127.5).sub(1).permute(3, 0, 1, 2).unsqueeze(0))
    torch.testing.assert_close(res.latents[:, :1].float(), first.permute(0, 2, 1, 3, 4), atol=1e-5, rtol=0)

    # a shot switch (their scene-cut prefix) runs as their pipeline does: tests/pipeline/test_longlive2_parity.py
    assert wm.sampling.shot_sinks and wm.sampling.shot_rope_offset == 8.0


class _PromptTable:
    """A text encoder stand-in: one fixed random embedding per prompt text (what the API encodes, and when)."""

    def __init__(self, text_dim: int):
        self.text_dim, self.table = text_dim, {}

    def encode(self, prompts):
        (p,) = prompts
        if p not in self.table:
            g = torch.Generator().manual_seed(len(self.table))
            self.table[p] = torch.randn(1, 8, self.text_dim, generator=g)
        return self.table[p]


def _shot_world(fx):
    """The fixture's LongLive 2.0 model with a prompt table, 2-frame blocks and a 3-block window + 1 sink:
    (world model, block frames, latent (h, w), sampling, cache config)."""
    from inferix_core.cache import KVCacheConfig
    from inferix_core.models.state_dict import world_model_from_state_dict

    path, info, _, model = fx
    sd, _, _ = load_wan_checkpoint(path)
    wm = world_model_from_state_dict(
        sd,
        family="longlive2",
        device="cpu",
        dtype="fp32",
        num_heads=model.config.num_heads,
        text_len=model.config.text_len,
    )
    wm = dataclasses.replace(wm, text_encoder=_PromptTable(wm.config.text_dim))
    frames, hw = 2, tuple(info["latent_shape"][3:])
    sampling = dataclasses.replace(wm.sampling, block_frames=frames)
    return wm, frames, hw, sampling, KVCacheConfig(window_frames=3 * frames, sink_frames=1)


def test_a_shot_schedule_runs_as_their_shot_layout(fx, tmp_path):
    """generate_video with a prompt that starts with their scene-cut prefix = the pipeline with that block as a
    shot start (pinned shot sink, RoPE offset), the prefixed text on the shot's first block and the bare caption
    after it (NVlabs/LongLive utils/dataset.py `_apply_shot_durations`); and it differs from a plain switch."""
    from inferix_core.api import LONGLIVE2_SCENE_CUT_PREFIX, generate_video
    from inferix_core.cache import ShotSinkKVCache
    from inferix_core.engine.schedules import PromptSchedule, block_timing
    from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest

    wm, frames, (h, w), sampling, cache = _shot_world(fx)
    s, timing = wm.spatial_compression, block_timing(wm, sampling)
    cut = LONGLIVE2_SCENE_CUT_PREFIX + "a wolf"
    shots = PromptSchedule([(0.0, "a fox"), (timing.start_seconds(2), cut)])
    kw = dict(num_blocks=5, width=w * s, height=h * s, sampling=sampling, cache=cache, decode=False)
    res = generate_video(wm, shots, **kw)

    enc = wm.text_encoder.encode
    pipe = BlockDiffusionPipeline(wm.transformer, sampling, cache)
    req = GenerationRequest(
        5, h, w, enc(["a fox"]), prompt_schedule=[(2, enc([cut])), (3, enc(["a wolf"]))], shot_blocks=(2,)
    )
    want = pipe.generate(req)
    assert isinstance(pipe.kv_cache, ShotSinkKVCache) and pipe.kv_cache.num_pins == 1
    torch.testing.assert_close(res.latents, want, atol=0, rtol=0)
    plain = generate_video(wm, PromptSchedule([(0.0, "a fox"), (timing.start_seconds(2), "a wolf")]), **kw)
    assert (plain.latents[:, 2 * frames :] - res.latents[:, 2 * frames :]).abs().max() > 1e-3


def test_an_interactive_shot_switch_equals_the_scheduled_one(fx):
    """InteractiveSession (inferix play): a prompt typed with their scene-cut prefix starts a shot at the next block,
    the shot's later blocks get the bare caption, and switches are hard (their pipeline never re-caches)."""
    from inferix_core.api import LONGLIVE2_SCENE_CUT_PREFIX
    from inferix_core.clients.session import InteractiveSession
    from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest

    wm, _, (h, w), sampling, cache = _shot_world(fx)
    s, cut = wm.spatial_compression, LONGLIVE2_SCENE_CUT_PREFIX + "a wolf"
    with InteractiveSession(
        wm, "a fox", width=w * s, height=h * s, sampling=sampling, cache=cache, decode=False
    ) as session:
        assert session.hard_switch
        blocks = [session.step().latents for _ in range(2)]
        session.switch_prompt(cut)
        blocks += [session.step().latents for _ in range(3)]
        assert session.prompt == "a wolf" and session.state.cache.num_pins == 1
    enc = wm.text_encoder.encode
    pipe = BlockDiffusionPipeline(wm.transformer, sampling, cache)
    req = GenerationRequest(
        5, h, w, enc(["a fox"]), prompt_schedule=[(2, enc([cut])), (3, enc(["a wolf"]))], shot_blocks=(2,),
        noise=SeededNoise(0),
    )  # fmt: skip
    torch.testing.assert_close(torch.cat(blocks, dim=1), pipe.generate(req), atol=0, rtol=0)


def test_a_start_image_is_one_decision_for_the_facade_and_branch_video(fx, tmp_path):
    """image_world.start_image_role decides once what an image is to a TI2V model: generate_video given the
    image equals generate_video given the same image as its one start frame (the clean first latent), and
    branch_video, which cannot start from it, refuses in one line instead of dropping it."""
    import numpy as np
    from PIL import Image

    from inferix_core.api import generate_video
    from inferix_core.clients.branching import branch_video
    from inferix_core.engine.image_conditioning import resized_image_frames
    from inferix_core.errors import ConfigError
    from inferix_core.models.registry import load_world_model

    path, info, t, _ = fx
    vae_files = sorted(path.parent.glob("wan22_vae*.safetensors"))
    if not vae_files:
        pytest.skip("no Wan 2.2 VAE fixture")
    wm = load_world_model(str(path), vae_path=str(vae_files[0]), device="cpu", dtype="fp32")
    _, _, frames, h, w = info["latent_shape"]
    s = wm.spatial_compression
    rgb = np.random.default_rng(3).integers(0, 256, (h * s, w * s, 3), dtype=np.uint8)  # fresh, never flat
    image = tmp_path / "start.png"
    Image.fromarray(rgb).save(image)
    sampling = dataclasses.replace(wm.sampling, block_frames=frames)
    run = dict(num_blocks=2, width=w * s, height=h * s, seed=5, sampling=sampling, decode=False)
    context = t["context"].unsqueeze(0)
    by_image = generate_video(wm, context, start_image=str(image), **run).latents
    by_frame = generate_video(wm, context, start_frames=resized_image_frames(str(image), h * s, w * s), **run).latents
    assert torch.isfinite(by_image).all()
    torch.testing.assert_close(by_image, by_frame, atol=0, rtol=0)
    with pytest.raises(ConfigError, match="TI2V"):
        branch_video(wm, "a", ["b"], past_blocks=1, future_blocks=1, width=w * s, height=h * s, start_image=str(image))


def test_an_interactive_session_refuses_a_size_the_wan22_stride_does_not_divide(fx):
    """A Wan 2.2 / LongLive 2.0 model needs multiples of 32 (VAE stride 16 x patch 2): a session at a multiple of
    16 only is refused in one line that names the model's step and the nearest sizes, before any model work."""
    from inferix_core.clients.session import InteractiveSession
    from inferix_core.errors import ConfigError
    from inferix_core.models.registry import load_world_model

    path, _info, t, _ = fx
    vae_files = sorted(path.parent.glob("wan22_vae*.safetensors"))
    if not vae_files:
        pytest.skip("no Wan 2.2 VAE fixture")
    wm = load_world_model(str(path), vae_path=str(vae_files[0]), device="cpu", dtype="fp32")
    step = wm.size_step
    assert step == 32
    with pytest.raises(ConfigError, match=rf"multiples of {step} for this {wm.family} model.*try {2 * step}x{step}"):
        InteractiveSession(wm, t["context"].unsqueeze(0), width=2 * step + 16, height=step, decode=False)
