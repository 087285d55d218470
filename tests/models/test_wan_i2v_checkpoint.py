"""Wan 2.1 I2V files in the layouts they ship in are recognised by their content and load as family wan21_i2v.

The tiny files have the exact key set of the released Wan2.1-I2V-14B transformers (the authors' `WanModel(
model_type='i2v')` state dict, which `tests/pipeline/test_wan_i2v_parity.py` loads strictly: `img_emb.proj.*`,
`blocks.N.cross_attn.k_img/v_img/norm_k_img` beside the T2V keys, in_dim 36), in two layouts:

* Wan-AI/Wan2.1-I2V-14B-480P / -720P: bare keys in `diffusion_pytorch_model-0000N-of-00007.safetensors` with
  `diffusion_pytorch_model.safetensors.index.json` and the authors' `config.json` (`model_type: i2v`, dim,
  num_heads, …) in one folder;
* Comfy-Org's flat repack (`wan2.1_i2v_480p_14B_fp16.safetensors` etc.): the same bare keys in one file.

Neither file name carries a hint: the family comes from the weights. The 14B dims are checked on shapes alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from inferix_core import cli
from inferix_core.models.family_detect import FileFacts, detect_family
from inferix_core.models.registry import FAMILIES, load_world_model, resolve_family
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.shapes import expected_wan_shapes, infer_wan_config

# dims a multiple of the Wan head size (128), so a flat file without a config needs nothing else; CLIP ViT-H's 1280
TINY_I2V = WanConfig(model_type="i2v", in_dim=36, dim=256, ffn_dim=512, freq_dim=32, text_dim=64, num_heads=2,
                     num_layers=3, has_image_input=True, clip_dim=1280)  # fmt: skip
WAN21_I2V_14B = WanConfig(model_type="i2v", in_dim=36, dim=5120, ffn_dim=13824, num_heads=40, num_layers=40,
                          has_image_input=True, clip_dim=1280)  # fmt: skip
SHARDS = 7  # Wan-AI/Wan2.1-I2V-14B-480P and -720P ship seven shards


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = CausalWanTransformer(TINY_I2V)
    return {k: (v + 0.01 * torch.randn_like(v)).to(torch.float16).contiguous() for k, v in model.state_dict().items()}


def official_folder(tmp_path, state) -> str:
    """The authors' release layout: seven bare-key shards, their index and config.json."""
    folder = tmp_path / "release"
    folder.mkdir()
    keys = sorted(state)
    weight_map = {}
    for i in range(SHARDS):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        part = {k: state[k] for k in keys[i::SHARDS]}
        save_file(part, str(folder / name))
        weight_map |= dict.fromkeys(part, name)
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    c = TINY_I2V
    (folder / "config.json").write_text(json.dumps({  # the authors' config.json fields
        "_class_name": "WanModel", "_diffusers_version": "0.30.0", "dim": c.dim, "eps": c.eps, "ffn_dim": c.ffn_dim,
        "freq_dim": c.freq_dim, "in_dim": c.in_dim, "model_type": "i2v", "num_heads": c.num_heads,
        "num_layers": c.num_layers, "out_dim": c.out_dim, "text_len": c.text_len,
    }))  # fmt: skip
    return str(folder)


def comfy_flat(tmp_path, state) -> str:
    path = tmp_path / "model_a.safetensors"  # no family word in the name
    save_file(state, str(path))
    return str(path)


LAYOUTS = {"official_sharded": official_folder, "comfyui_flat": comfy_flat}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_released_layouts_resolve_to_wan21_i2v(layout, state, tmp_path):
    path = LAYOUTS[layout](tmp_path, state)
    choice = resolve_family(path)
    assert (choice.family, choice.stage) == ("wan21_i2v", "weights"), choice
    assert "k_img" in choice.reason and "in_dim 36" in choice.reason
    world = load_world_model(path, device="cpu", dtype="fp32")
    assert world.family == "wan21_i2v" and world.config == TINY_I2V
    assert world.sampling == FAMILIES["wan21_i2v"].sampling
    assert sum(p.numel() for p in world.transformer.parameters()) == TINY_I2V.num_parameters()
    got = world.transformer.state_dict()
    assert all(torch.equal(got[k], state[k].float()) for k in state)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_inferix_info_shows_the_family(layout, state, tmp_path, capsys):
    path = LAYOUTS[layout](tmp_path, state)
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "family: wan21_i2v (Wan 2.1 I2V" in out and "family chosen because: Wan 2.1 I2V weights" in out


def test_the_14b_config_is_read_from_the_shapes():
    """Wan2.1-I2V-14B's shapes give its config (dim 5120, 40 layers × 40 heads, ffn 13824, in_dim 36, CLIP 1280),
    and it is I2V, not Krea's 14B T2V."""
    shapes = expected_wan_shapes(WAN21_I2V_14B, clip_dim=1280)
    assert "blocks.39.cross_attn.norm_k_img.weight" in shapes and shapes["img_emb.proj.1.weight"] == (1280, 1280)
    cfg = infer_wan_config(shapes)
    assert cfg == WAN21_I2V_14B and cfg.num_heads == 40 and cfg.head_dim == 128
    # 16.39e9 parameters: Comfy-Org's fp16 file is 32.8 GB; the memory planner counts the image branch too
    assert cfg.num_parameters() == sum(math.prod(s) for s in shapes.values())
    assert 32.7e9 < 2 * cfg.num_parameters() < 32.9e9
    choice = detect_family(FileFacts(Path("x.safetensors"), cfg, frozenset(shapes)), FAMILIES)
    assert choice.family == "wan21_i2v"
    t2v = infer_wan_config({k: v for k, v in expected_wan_shapes(WanConfig(dim=5120, ffn_dim=13824, num_heads=40,
                                                                           num_layers=40)).items()})  # fmt: skip
    assert detect_family(FileFacts(Path("x.safetensors"), t2v, frozenset()), FAMILIES).family == "krea"


def test_other_families_refuse_i2v_weights_and_i2v_refuses_t2v(state, tmp_path):
    path = comfy_flat(tmp_path, state)
    with pytest.raises(Exception, match="use family 'wan21_i2v'"):
        load_world_model(path, family="self_forcing", device="cpu")
    t2v = {k: v for k, v in state.items() if "img" not in k}
    t2v["patch_embedding.weight"] = state["patch_embedding.weight"][:, :16].contiguous()
    save_file(t2v, str(tmp_path / "t2v.safetensors"))
    with pytest.raises(Exception, match=r"not a Wan 2\.1 I2V file"):
        load_world_model(str(tmp_path / "t2v.safetensors"), family="wan21_i2v", device="cpu")
