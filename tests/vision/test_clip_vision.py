"""CLIP vision tokens through transformers: the authors' encoder (fixtures), ComfyUI/open_clip layouts, preprocessing."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError
from inferix_core.vision import CLIPVisionEncoder, clip_pixel_values, tokens_from_clip_vision_output
from inferix_core.vision.clip_vision import CLIP_MEAN, CLIP_STD
from tests.fixture_utils import files_of_kind

FIXTURES = files_of_kind("clip_vision")


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_tokens_match_the_authors_encoder(path):
    """The authors' encode_video (Wan ViT, use_31_block) == transformers' CLIPVisionModel on renamed weights."""
    info = json.loads(safe_open(str(path), "pt").metadata()["info"])
    t = load_file(str(path))
    weights = {k[len("weights.") :]: v.clone() for k, v in t.items() if k.startswith("weights.")}
    encoder = CLIPVisionEncoder.from_state_dict(weights, num_attention_heads=info["num_attention_heads"])
    tokens = encoder.encode(t["image"])
    assert list(tokens.shape) == info["tokens_shape"] == [1, encoder.num_tokens, info["config"]["dim"]]
    assert torch.isfinite(tokens).all()
    torch.testing.assert_close(tokens, t["tokens"], atol=1e-4, rtol=1e-4)


def tiny_hf(seed=0):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(seed)
    config = CLIPVisionConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        hidden_act="gelu",
        projection_dim=16,
    )
    model = CLIPVisionModelWithProjection(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # LayerNorms and biases away from their 1/0 init
    return model


def to_open_clip(sd):
    """transformers names → open_clip's `visual.*` (the inverse of ComfyUI's convert_to_transformers)."""
    out = {
        "visual.class_embedding": sd["vision_model.embeddings.class_embedding"],
        "visual.conv1.weight": sd["vision_model.embeddings.patch_embedding.weight"],
        "visual.positional_embedding": sd["vision_model.embeddings.position_embedding.weight"],
        "visual.proj": sd["visual_projection.weight"].t(),
    }
    for a, b in (("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")):
        for kind in ("weight", "bias"):
            out[f"visual.{a}.{kind}"] = sd[f"vision_model.{b}.{kind}"]
    names = {"layer_norm1": "ln_1", "layer_norm2": "ln_2", "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj",
             "self_attn.out_proj": "attn.out_proj"}  # fmt: skip
    layers = {int(m.group(1)) for k in sd if (m := re.match(r"vision_model\.encoder\.layers\.(\d+)\.", k))}
    for i in layers:
        p = f"vision_model.encoder.layers.{i}."
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                out[f"visual.transformer.resblocks.{i}.{theirs}.{kind}"] = sd[p + f"{ours}.{kind}"]
        for kind in ("weight", "bias"):
            out[f"visual.transformer.resblocks.{i}.attn.in_proj_{kind}"] = torch.cat(
                [sd[p + f"self_attn.{x}_proj.{kind}"] for x in "qkv"]
            )
    return out


def test_comfyui_and_open_clip_files_equal_the_hf_model_run_directly(tmp_path):
    hf = tiny_hf()
    sd = {k: v.contiguous() for k, v in hf.state_dict().items()}
    image = torch.rand(2, 3, 40, 72) * 2 - 1
    pixels = clip_pixel_values(image, 28)
    with torch.no_grad():
        expected = hf(pixel_values=pixels, output_hidden_states=True).hidden_states[-2]
    comfy = tmp_path / "clip_vision_h.safetensors"  # ComfyUI's layout: transformers names + visual_projection
    save_file(sd, str(comfy))
    openclip = tmp_path / "open_clip.safetensors"
    save_file({k: v.contiguous() for k, v in to_open_clip(sd).items()}, str(openclip))
    for path in (comfy, openclip):
        encoder = CLIPVisionEncoder.load(path, num_attention_heads=2)
        got = encoder.encode(image)
        assert got.shape == (2, 5, 128)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    last = hf(pixel_values=pixels, output_hidden_states=True).hidden_states[-1]
    assert (got - last).abs().max() > 1e-3  # penultimate, not the last layer


def test_hf_folder_loads(tmp_path):
    from transformers import CLIPVisionModel

    hf = tiny_hf(1)
    folder = tmp_path / "clip"
    vision = CLIPVisionModel(hf.config)
    getattr(vision, "vision_model", vision).load_state_dict(hf.vision_model.state_dict())
    vision.save_pretrained(str(folder))
    image = torch.rand(1, 3, 28, 28) * 2 - 1
    with torch.no_grad():
        expected = hf(pixel_values=clip_pixel_values(image, 28), output_hidden_states=True).hidden_states[-2]
    torch.testing.assert_close(CLIPVisionEncoder.load(folder).encode(image), expected, atol=1e-5, rtol=1e-5)


def test_preprocessing_closed_forms():
    # a constant image stays constant through bicubic resizing: ((c + 1)/2 - mean)/std per channel
    c = torch.tensor([-0.6, 0.1, 0.8])
    image = c.view(1, 3, 1, 1).expand(1, 3, 352, 640)
    expected = ((c + 1) / 2 - torch.tensor(CLIP_MEAN)) / torch.tensor(CLIP_STD)
    got = clip_pixel_values(image)
    assert got.shape == (1, 3, 224, 224)
    torch.testing.assert_close(got, expected.view(1, 3, 1, 1).expand_as(got), atol=1e-6, rtol=0)
    # the whole frame is squashed to the square (no crop): a left-right ramp spans the full width
    ramp = torch.linspace(-1, 1, 640).view(1, 1, 1, 640).expand(1, 3, 352, 640)
    row = clip_pixel_values(ramp)[0, 0, 100] * CLIP_STD[0] + CLIP_MEAN[0]
    assert row[0] < 0.01 and row[-1] > 0.99
    # no antialias: a 224² input is returned unchanged up to the affine map
    square = torch.rand(1, 3, 224, 224) * 2 - 1
    ref = F.interpolate(square, size=(224, 224), mode="bicubic", align_corners=False)
    torch.testing.assert_close(ref, square)


def test_bad_inputs_say_what_to_do(tmp_path):
    bad = tmp_path / "not_clip.safetensors"
    save_file({"decoder.conv1.weight": torch.zeros(1)}, str(bad))
    with pytest.raises(CheckpointLayoutError, match="clip_vision_h"):
        CLIPVisionEncoder.load(bad)
    with pytest.raises(ConfigError, match="penultimate_hidden_states"):
        tokens_from_clip_vision_output({"last_hidden_state": torch.zeros(1, 257, 1280)})
    out = type("Output", (), {"penultimate_hidden_states": torch.ones(1, 257, 1280)})()
    assert tokens_from_clip_vision_output(out).shape == (1, 257, 1280)
