"""Matrix-Game 2.0 weight files: the released layout loads as the right variant, from the weights alone.

The tiny files are written with the exact key layout of the released `base_distill.safetensors`,
`gta_keyboard2dim`, `templerun_7dim_onlykey` files: `model.` + the authors' `CausalWanModel` keys (no
text embedding, `img_emb.proj.{0,1,3,4}`, `blocks.N.action_model.*` in the first blocks), listed here from
README_matrix_game2.md §2 independently of the loader's own shape table. Each is saved as `model.safetensors`
(no hint in the name) in fp16, bf16 or fp8.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.engine.conditioning import matrix_game_request
from inferix_core.errors import ConfigError, ShapeMismatchError
from inferix_core.models.matrix_game2 import MATRIX_GAME2_VARIANTS, MatrixGameConditioning
from inferix_core.models.registry import load_world_model
from inferix_core.models.wan.checkpoint import load_wan_checkpoint
from inferix_core.pipeline import BlockDiffusionPipeline
from tests.fixture_utils import files_of_kind, read_fixture

DIM, FFN, FREQ, LAYERS, CLIP, HEADS_A, HS = 128, 96, 16, 3, 24, 2, 8  # dim 128: one 128-dim head, as Wan's


def released_state(keyboard_dim: int, mouse: bool, action_blocks=(0, 1), seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors under the released files' keys and shapes (`model.` prefix)."""
    g = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    c, rows = 64 * HEADS_A, 4 * 3

    def t(name, *shape, scale=None):
        sd["model." + name] = torch.randn(*shape, generator=g) * (scale or shape[-1] ** -0.5)

    def lin(name, o, i, bias=True):
        t(f"{name}.weight", o, i)
        if bias:
            t(f"{name}.bias", o, scale=0.1)

    def affine(name, n, bias=True):
        sd[f"model.{name}.weight"] = 1 + torch.randn(n, generator=g) * 0.2
        if bias:
            t(f"{name}.bias", n, scale=0.1)

    t("patch_embedding.weight", DIM, 36, 1, 2, 2, scale=(36 * 4) ** -0.5)
    t("patch_embedding.bias", DIM, scale=0.1)
    lin("time_embedding.0", DIM, FREQ)
    lin("time_embedding.2", DIM, DIM)
    lin("time_projection.1", 6 * DIM, DIM)
    affine("img_emb.proj.0", CLIP)
    lin("img_emb.proj.1", CLIP, CLIP)
    lin("img_emb.proj.3", DIM, CLIP)
    affine("img_emb.proj.4", DIM)
    for i in range(LAYERS):
        b = f"blocks.{i}"
        t(f"{b}.modulation", 1, 6, DIM, scale=0.2)
        for attn in ("self_attn", "cross_attn"):
            for p in "qkvo":
                lin(f"{b}.{attn}.{p}", DIM, DIM)
            affine(f"{b}.{attn}.norm_q", DIM, bias=False)
            affine(f"{b}.{attn}.norm_k", DIM, bias=False)
        affine(f"{b}.norm3", DIM)
        lin(f"{b}.ffn.0", FFN, DIM)
        lin(f"{b}.ffn.2", DIM, FFN)
        if i in action_blocks:
            a = f"{b}.action_model"
            lin(f"{a}.keyboard_embed.0", HS, keyboard_dim)
            lin(f"{a}.keyboard_embed.2", HS, HS)
            lin(f"{a}.mouse_attn_q", c, DIM, bias=False)
            lin(f"{a}.keyboard_attn_kv", 2 * c, HS * rows, bias=False)
            lin(f"{a}.proj_keyboard", DIM, c, bias=False)
            affine(f"{a}.key_attn_q_norm", 64, bias=False)
            affine(f"{a}.key_attn_k_norm", 64, bias=False)
            if mouse:
                lin(f"{a}.mouse_mlp.0", c, DIM + 2 * rows)
                lin(f"{a}.mouse_mlp.2", c, c)
                affine(f"{a}.mouse_mlp.3", c)
                lin(f"{a}.t_qkv", 3 * c, c, bias=False)
                lin(f"{a}.proj_mouse", DIM, c, bias=False)
                affine(f"{a}.img_attn_q_norm", 64, bias=False)
                affine(f"{a}.img_attn_k_norm", 64, bias=False)
    t("head.modulation", 1, 2, DIM, scale=0.2)
    lin("head.head", 4 * 16, DIM)
    return sd


CASES = [("universal", 4, True, torch.float16), ("gta_drive", 2, True, torch.bfloat16),
         ("templerun", 7, False, torch.float8_e4m3fn)]  # fmt: skip


@pytest.mark.parametrize(("variant", "keyboard", "mouse", "dtype"), CASES, ids=[c[0] for c in CASES])
def test_released_layout_loads_as_its_variant(tmp_path, variant, keyboard, mouse, dtype):
    state = released_state(keyboard, mouse)
    path = tmp_path / variant / "model.safetensors"
    path.parent.mkdir()
    save_file({k: v.to(dtype).contiguous() for k, v in state.items()}, str(path))
    world = load_world_model(str(path), device="cpu", dtype="fp32")
    v = MATRIX_GAME2_VARIANTS[variant]
    assert (world.family, world.variant) == ("matrix_game2", variant)
    assert world.sampling == v.sampling and world.default_cache == v.cache
    act = world.config.action_config
    assert (act.keyboard_dim_in, act.enable_mouse, act.blocks, act.heads_num) == (keyboard, mouse, (0, 1), HEADS_A)
    assert world.config.in_dim == 36 and world.config.clip_dim == CLIP and world.config.image_context
    assert not hasattr(world.transformer, "text_embedding")
    loaded = world.transformer.state_dict()
    for key, value in state.items():
        torch.testing.assert_close(loaded[key.removeprefix("model.")], value.to(dtype).float(), atol=0, rtol=0)
    assert world.transformer.blocks[2].action_model is None
    assert variant in world.describe()
    # it runs one block through the pipeline, with the variant's own steps and window
    cond = MatrixGameConditioning(
        torch.randn(1, 20, 3, 4, 4), torch.randn(1, 5, CLIP), torch.rand(1, 9, keyboard).round(),
        torch.randn(1, 9, 2) * 0.1 if mouse else None,
    )  # fmt: skip
    pipe = BlockDiffusionPipeline(world.transformer, world.sampling, world.default_cache)
    out = pipe.generate(matrix_game_request(cond, 1))
    assert out.shape == (1, 3, 16, 4, 4) and torch.isfinite(out).all()


def test_bare_keys_and_wrong_family(tmp_path):
    state = {k.removeprefix("model."): v for k, v in released_state(4, True).items()}
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    _, config, info = load_wan_checkpoint(path)
    assert info.layout == "wan" and info.family_hints[0] == "matrix_game2"
    assert config.action_config.keyboard_dim_in == 4 and not config.has_image_input
    with pytest.raises(ConfigError, match="matrix_game2"):
        load_world_model(str(path), family="self_forcing", device="cpu", dtype="fp32")


def test_matrix_game_family_needs_action_modules(tmp_path):
    from inferix_core.models.wan.checkpoint import save_wan_checkpoint
    from inferix_core.models.wan.config import WanConfig
    from tests.models.wan_state import random_wan_state_dict

    cfg = WanConfig(dim=128, ffn_dim=64, freq_dim=16, text_dim=32, num_heads=1, num_layers=1)
    path = tmp_path / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(cfg), path, config=cfg)
    with pytest.raises(ConfigError, match="not a Matrix-Game"):
        load_world_model(str(path), family="matrix_game2", device="cpu", dtype="fp32")


def test_unreleased_action_width_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(released_state(5, True), str(path))
    with pytest.raises(ConfigError, match="no released"):
        load_world_model(str(path), device="cpu", dtype="fp32")


@pytest.mark.parametrize("path", files_of_kind("matrix_game2"), ids=lambda p: p.name)
def test_fixture_weights_load_with_their_metadata_config(path):
    """The loader reads the same config from the fixture's tensors as its `info` states (nested action_config)."""
    info, _ = read_fixture(path)
    _, config, _ = load_wan_checkpoint(path)
    act, stored = config.action_config, info["config"]["action_config"]
    assert list(act.blocks) == stored["blocks"] and act.keyboard_dim_in == stored["keyboard_dim_in"]
    assert act.enable_mouse == stored["enable_mouse"] and act.heads_num == stored["heads_num"]
    assert config.clip_dim == info["config"]["clip_dim"] and config.num_heads == info["config"]["num_heads"]


def test_conditioning_slices_and_errors():
    cond = MatrixGameConditioning(torch.randn(1, 20, 6, 4, 4), torch.randn(1, 5, CLIP), torch.zeros(1, 9, 4),
                                  torch.zeros(1, 9, 2))  # fmt: skip
    block = cond.for_block(0, 3)
    assert block.cond_concat.shape[2] == 3 and block.keyboard.shape[1] == block.mouse.shape[1] == 9
    with pytest.raises(ShapeMismatchError, match="needs 21"):
        cond.for_block(3, 3)  # only block 0's rows are written so far
    cond.extend_actions(torch.ones(1, 12, 4), torch.ones(1, 12, 2))
    block = cond.for_block(3, 3)
    assert block.keyboard.shape[1] == 21 and torch.equal(block.cond_concat, cond.cond_concat[:, :, 3:6])
    with pytest.raises(ConfigError, match="mouse"):
        cond.extend_actions(torch.ones(1, 12, 4))
    with pytest.raises(ShapeMismatchError, match="6 latent frames"):
        cond.for_block(6, 3)
