"""Core ComfyUI types at the pack's sockets: a core VAE (Wan 2.1) and core LATENTs (VAE space).

No ComfyUI import: a core `comfy.sd.VAE` is simulated by a small object with `first_stage_model`, whose
state dict has ComfyUI's key names. `comfy_wan21_vae_keys.json` lists the keys and shapes of
`comfy.ldm.wan.vae.WanVAE(dim=4, z_dim=16, temperal_downsample=[False, True, True])` from ComfyUI a125cd8
(the Wan 2.1 branch of `comfy.sd.VAE`, at a tiny width); `comfy_wan22_vae_keys.json` those of
`comfy.ldm.wan.vae2_2.WanVAE(dim=2, dec_dim=4, z_dim=48, temperal_downsample=[False, True, True])` from the
same commit (the Wan 2.2 branch, built with stubs for `comfy.ops` = torch.nn), identical to Wan2.2's keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inferix_core.errors import ConfigError
from tests.fixture_utils import tiny_conditioning, tiny_loader_inputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COMFY_KEYS = Path(__file__).with_name("comfy_wan21_vae_keys.json")
COMFY_WAN22_KEYS = Path(__file__).with_name("comfy_wan22_vae_keys.json")
LOADER = tiny_loader_inputs()


class FirstStage:
    """Stands in for the torch module a core VAE wraps: only `state_dict()` is read."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self._state)


class CoreVAE:
    """Stands in for `comfy.sd.VAE`: the Wan VAE module is `first_stage_model`."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self.first_stage_model = FirstStage(state)


def fixture_vae() -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURES / "wan_vae_tiny.safetensors"))


def core_vae_from_fixture(dtype: torch.dtype = torch.float32) -> CoreVAE:
    """The fixture VAE's weights under ComfyUI's key names (the fixture stores them under `weights.`)."""
    return CoreVAE(
        {k.removeprefix("weights."): v.to(dtype) for k, v in fixture_vae().items() if k.startswith("weights.")}
    )


def to_uint8(pixels: torch.Tensor) -> torch.Tensor:
    """[B, 3, T, H, W] in -1..1 → [T, H, W, 3] floats in 0..1 as IMAGE, through uint8 like the node."""
    return ((pixels[0].clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 3, 0).float() / 255.0


@pytest.fixture
def world_model(node_classes, models_dir):
    (model,) = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**LOADER)["result"]
    return model


def test_comfyui_wan21_vae_keys_build_our_vae():
    from inferix_nodes.core_interop import wan_vae_from_core

    shapes = json.loads(COMFY_KEYS.read_text())
    state = {k: torch.randn(shape) * 0.02 for k, shape in shapes.items()}
    vae = wan_vae_from_core(CoreVAE(state))
    assert (vae.config.dim, vae.config.z_dim) == (4, 16)
    assert vae.config.temporal_downsample == (False, True, True)
    assert set(vae.state_dict()) == set(shapes)  # every ComfyUI key used, none missing


def test_comfyui_wan22_vae_keys_build_our_wan22_vae():
    from inferix_nodes.core_interop import wan_vae_from_core

    from inferix_core.vae import Wan22VAE

    shapes = json.loads(COMFY_WAN22_KEYS.read_text())
    state = {k: torch.randn(shape) * 0.02 for k, shape in shapes.items()}
    vae = wan_vae_from_core(CoreVAE(state))
    assert isinstance(vae, Wan22VAE)
    assert (vae.config.dim, vae.config.dec_dim, vae.config.z_dim) == (2, 4, 48)
    assert vae.config.spatial_compression == 16
    assert set(vae.state_dict()) == set(shapes)


def test_core_wan22_latent_decodes_with_a_core_vae_alone(node_classes):
    """A core Wan 2.2 VAE at the VAE socket: its latents decode as Wan2.2's reference decode."""
    fixture = FIXTURES / "wan22_vae_tiny.safetensors"
    ref = load_file(str(fixture))
    shape = (1, -1, 1, 1, 1)
    core_latent = ref["z"] / (1.0 / ref["latent_std"]).view(shape) + ref["latent_mean"].view(shape)
    core = CoreVAE({k.removeprefix("weights."): v for k, v in ref.items() if k.startswith("weights.")})
    (frames,) = node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
        latent={"samples": core_latent}, block_frames=2, use_preview_decoder=False, vae=core
    )
    expected = to_uint8(ref["decode_output"])
    assert frames.shape == expected.shape
    assert (frames - expected).abs().max() <= 1 / 255 + 1e-6


def test_core_latent_decodes_with_a_core_vae_alone(node_classes):
    """A core LATENT is VAE space (a sampler's process_latent_out: x·std + mean for Wan 2.1): decoded right,
    with no world model. The fixture's `decode_output` is the reference decode of the normalised `z`."""
    ref = fixture_vae()
    shape = (1, -1, 1, 1, 1)
    core_latent = ref["z"] / (1.0 / ref["latent_std"]).view(shape) + ref["latent_mean"].view(shape)
    (frames,) = node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
        latent={"samples": core_latent}, block_frames=2, use_preview_decoder=False, vae=core_vae_from_fixture()
    )
    expected = to_uint8(ref["decode_output"])
    assert frames.shape == expected.shape == (9, 16, 24, 3)
    assert (frames - expected).abs().max() <= 1 / 255 + 1e-6


def test_core_vae_equals_the_world_models_vae(node_classes, world_model):
    latent = {"samples": torch.randn(1, 16, 4, 4, 6, generator=torch.Generator().manual_seed(3))}
    decode = node_classes["InferixVAEDecode"]()
    args = dict(latent=latent, block_frames=1, use_preview_decoder=False)
    (own,) = decode.EXECUTE_NORMALIZED(**args, world_model=world_model)
    (core,) = decode.EXECUTE_NORMALIZED(**args, world_model=world_model, vae=core_vae_from_fixture())
    (alone,) = decode.EXECUTE_NORMALIZED(**args, vae=core_vae_from_fixture())
    assert torch.equal(own, core) and torch.equal(own, alone)


def test_block_denoise_latent_is_vae_space(node_classes, world_model, output_dir):
    cond = [[tiny_conditioning(0), {}]]
    latent, image, video, _core_video, _world = node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
        world_model=world_model,
        prompt="",
        num_blocks=2,
        seconds=0.0,
        width=96,
        height=64,
        denoising_steps="1000",
        seed=1,
        conditioning=cond,
    )["result"]
    engine = video.latents.permute(0, 2, 1, 3, 4)  # normalised, [B, C, F, h, w]
    torch.testing.assert_close(latent["samples"], world_model.vae.denormalise(engine))
    (decoded,) = node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
        world_model=world_model, latent=latent, block_frames=3, use_preview_decoder=False
    )
    assert (decoded - image).abs().max() <= 1 / 255 + 1e-6


@pytest.mark.parametrize(
    "core_vae, match",
    [
        (object(), "no first_stage_model"),
        (CoreVAE({"decoder.conv_in.weight": torch.zeros(1)}), "not a Wan 2.1 / 2.2 VAE"),
    ],
)
def test_wrong_core_vae_is_refused_with_a_message(node_classes, core_vae, match):
    with pytest.raises(ConfigError, match=match):
        node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
            latent={"samples": torch.zeros(1, 16, 1, 2, 2)}, block_frames=1, use_preview_decoder=False, vae=core_vae
        )


def test_vae_decode_needs_some_vae(node_classes):
    with pytest.raises(ConfigError, match="needs a VAE"):
        node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
            latent={"samples": torch.zeros(1, 16, 1, 2, 2)}, block_frames=1, use_preview_decoder=False
        )
