"""Checkpoint layouts: every supported layout round-trips to the canonical state dict and config, and
bad files fail with messages that say what was found and what was expected."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from wan_state import random_wan_state_dict

from inferix_core.errors import CheckpointLayoutError, ConfigError, MissingFileError
from inferix_core.models.wan.checkpoint import (
    expected_wan_shapes,
    load_wan_checkpoint,
    save_wan_checkpoint,
)
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.layouts import detect_layout, from_canonical, to_canonical
from tests.fixture_utils import files_of_kind

FIXTURES = Path(__file__).parents[1] / "fixtures"
# head_dim 16: num_heads is not recoverable from shapes, so loads of metadata-free files pass it.
TINY = WanConfig(dim=64, ffn_dim=128, freq_dim=32, text_dim=32, num_heads=4, num_layers=2)


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return random_wan_state_dict(TINY, seed=0)


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], cast: torch.dtype | None = None):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        ref = v.to(cast).float() if cast is not None else v
        assert got[k].dtype == torch.float32, k
        assert torch.equal(got[k], ref), k


def test_helper_matches_expected_shapes():
    """The test helper (written from README §1.2) and the loader's shape table agree, action included."""
    cfg = dataclasses.replace(TINY, action_dim=5)
    sd = random_wan_state_dict(cfg)
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected_wan_shapes(cfg)
    assert len(random_wan_state_dict(TINY)) == 69  # as in causal_wan_tiny.safetensors


# (save layout, file name, save kwargs, detected layout, storage dtype or None)
ROUND_TRIPS = {
    "comfyui_bare": ("wan", "wan_t2v.safetensors", {}, "wan", None),
    "comfyui_prefixed": ("comfyui", "wan_t2v.safetensors", {}, "comfyui", None),
    "wan_pth": ("wan", "diffusion_pytorch_model.pth", {}, "wan", None),
    "diffusers": ("diffusers", "diffusion_pytorch_model.safetensors", {}, "diffusers", None),
    "self_forcing_pt": ("self_forcing", "self_forcing_dmd.pt", {}, "self_forcing", None),
    "fp16": ("wan", "wan_fp16.safetensors", {"dtype": torch.float16}, "wan", torch.float16),
    "bf16": ("comfyui", "wan_bf16.safetensors", {"dtype": torch.bfloat16}, "comfyui", torch.bfloat16),
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_round_trip(case, state, tmp_path):
    layout, name, kwargs, detected, cast = ROUND_TRIPS[case]
    path = tmp_path / name
    # diffusers ships num_heads in config.json beside the weights; the others need the argument
    save_wan_checkpoint(state, path, layout, config=TINY if layout == "diffusers" else None, **kwargs)
    sd, cfg, info = load_wan_checkpoint(path, num_heads=None if layout == "diffusers" else 4)
    assert_same(sd, state, cast)
    assert cfg == TINY
    assert info.layout == detected
    assert info.num_heads_source == ("config.json" if layout == "diffusers" else "argument")
    assert info.quantization is None
    assert info.stored_dtypes == (str(cast or torch.float32).removeprefix("torch."),)
    assert ("self_forcing" in info.family_hints) == (case == "self_forcing_pt")


def test_metadata_config_gives_num_heads_and_text_len(state, tmp_path):
    cfg = dataclasses.replace(TINY, text_len=16)
    save_wan_checkpoint(state, tmp_path / "m.safetensors", "comfyui", config=cfg)
    _, got, info = load_wan_checkpoint(tmp_path / "m.safetensors")
    assert got == cfg and info.num_heads_source == "file metadata"


def test_load_to_bf16(state, tmp_path):
    save_wan_checkpoint(state, tmp_path / "m.safetensors")
    sd, _, _ = load_wan_checkpoint(tmp_path / "m.safetensors", dtype=torch.bfloat16, num_heads=4)
    assert all(v.dtype == torch.bfloat16 for v in sd.values())
    assert torch.equal(sd["head.head.weight"], state["head.head.weight"].bfloat16())


def test_fp8_scaled(state, tmp_path):
    path = tmp_path / "wan_fp8_scaled.safetensors"
    save_wan_checkpoint(state, path, "comfyui", fp8_scaled=True, dtype=torch.bfloat16)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        assert f.get_slice("model.diffusion_model.blocks.0.self_attn.q.weight").get_dtype() == "F8_E4M3"
    assert {"model.diffusion_model.scaled_fp8", "model.diffusion_model.blocks.1.ffn.2.scale_weight"} <= keys

    sd, cfg, info = load_wan_checkpoint(path, num_heads=4)
    assert cfg == TINY and sorted(sd) == sorted(state)
    assert info.quantization == "fp8_scaled" and "float8_e4m3fn" in info.stored_dtypes
    assert info.dropped_keys == ("model.diffusion_model.scaled_fp8",)
    w, ref = sd["blocks.0.ffn.0.weight"], state["blocks.0.ffn.0.weight"]
    # e4m3 keeps 3 mantissa bits: relative error ≤ 2^-4, plus the subnormal step near zero
    step = ref.abs().amax() / 448 * 2**-9
    assert w.dtype == torch.float32 and ((w - ref).abs() <= ref.abs() * 2**-4 + step).all()
    assert not torch.equal(w, ref)  # it really went through fp8
    assert torch.equal(sd["blocks.0.norm3.weight"], state["blocks.0.norm3.weight"].bfloat16().float())

    kept, _, _ = load_wan_checkpoint(path, num_heads=4, keep_fp8=True)
    assert kept["blocks.0.ffn.0.weight"].dtype == torch.float8_e4m3fn
    scale = kept["blocks.0.ffn.0.scale_weight"]
    assert scale.dtype == torch.float32
    assert torch.equal(kept["blocks.0.ffn.0.weight"].float() * scale, w)
    assert kept["head.head.weight"].dtype == torch.float32


def test_self_forcing_fsdp_priority(state, tmp_path, caplog):
    """generator_ema wins over generator; wrapper segments and `model.` go; non-tensor entries are ignored."""
    fsdp = {f"model._fsdp_wrapped_module.{k}".replace("blocks.", "blocks._fsdp_wrapped_module.", 0): v
            for k, v in state.items()}  # fmt: skip
    other = {f"model.{k}": v + 1 for k, v in state.items()}
    torch.save({"generator": other, "generator_ema": fsdp, "critic": {"x": torch.zeros(1)}, "step": 7},
               tmp_path / "ckpt.pt")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="inferix_core.models.wan.checkpoint"):
        sd, _, info = load_wan_checkpoint(tmp_path / "ckpt.pt", num_heads=4)
    assert_same(sd, state)
    assert info.container_key == "generator_ema" and info.layout == "self_forcing"
    assert "training_checkpoint" in info.family_hints
    assert "'generator_ema'" in caplog.text

    torch.save({"generator": other}, tmp_path / "causvid.pt")
    sd, _, info = load_wan_checkpoint(tmp_path / "causvid.pt", num_heads=4)
    assert info.container_key == "generator" and "causvid" in info.family_hints
    assert torch.equal(sd["head.head.weight"], state["head.head.weight"] + 1)

    torch.save({"model": dict(state)}, tmp_path / "longlive.pt")
    _, _, info = load_wan_checkpoint(tmp_path / "longlive.pt", num_heads=4)
    assert info.container_key == "model" and info.layout == "wan" and "longlive" in info.family_hints


def test_action_embedding(tmp_path):
    cfg = dataclasses.replace(TINY, action_dim=5)
    state = random_wan_state_dict(cfg, seed=1)
    save_wan_checkpoint(state, tmp_path / "d.safetensors", "diffusers", config=cfg)
    sd, got, info = load_wan_checkpoint(tmp_path / "d.safetensors")
    assert got.action_dim == 5 and got == cfg and "action" in info.family_hints
    assert_same(sd, state)


WEIGHT_FILES = files_of_kind("causal_wan", lambda info, names: any(k.startswith("weights.") for k in names))


@pytest.mark.parametrize("path", WEIGHT_FILES, ids=[f.name for f in WEIGHT_FILES])
def test_fixture_file(path):
    sd, cfg, info = load_wan_checkpoint(path)
    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["info"])["config"]
        weights = {k.removeprefix("weights."): f.get_tensor(k) for k in f.keys() if k.startswith("weights.")}  # noqa: SIM118
    assert cfg == WanConfig.from_dict(meta)
    assert info.layout == "fixture" and info.key_prefix == "weights." and info.num_heads_source == "file metadata"
    assert_same(sd, weights)


def test_diffusers_names_and_shards(state, tmp_path):
    assert from_canonical("blocks.3.norm3.bias", "diffusers") == "blocks.3.norm2.bias"
    assert from_canonical("head.modulation", "diffusers") == "scale_shift_table"
    assert from_canonical("blocks.0.modulation", "diffusers") == "blocks.0.scale_shift_table"
    assert from_canonical("blocks.0.self_attn.o.weight", "diffusers") == "blocks.0.attn1.to_out.0.weight"
    assert from_canonical("blocks.0.cross_attn.norm_k.weight", "diffusers") == "blocks.0.attn2.norm_k.weight"
    assert from_canonical("blocks.0.ffn.0.bias", "diffusers") == "blocks.0.ffn.net.0.proj.bias"
    assert from_canonical("time_projection.1.weight", "diffusers") == "condition_embedder.time_proj.weight"
    assert from_canonical("head.head.weight", "diffusers") == "proj_out.weight"
    names = {k: from_canonical(k, "diffusers") for k in state}
    assert len(set(names.values())) == len(names)
    assert all(to_canonical(v, "diffusers") == k for k, v in names.items())
    assert to_canonical("rope.freqs_cos", "diffusers") is None
    assert to_canonical("blocks.0.norm3.weight", "diffusers") is None  # diffusers norm3 has no weights

    folder = tmp_path / "transformer"
    folder.mkdir()
    keys = sorted(names.values())
    shards = {"a.safetensors": keys[: len(keys) // 2], "b.safetensors": keys[len(keys) // 2 :]}
    inverse = {v: k for k, v in names.items()}
    for shard, ks in shards.items():
        save_file({k: state[inverse[k]] for k in ks}, str(folder / shard))
    index = {"weight_map": {k: s for s, ks in shards.items() for k in ks}}
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps({"num_attention_heads": 4, "attention_head_dim": 16}))
    sd, cfg, info = load_wan_checkpoint(folder)
    assert_same(sd, state)
    assert cfg == TINY and info.layout == "diffusers"


def test_detect_layout():
    assert detect_layout(["patch_embedding.weight", "head.modulation"]) == "wan"
    assert detect_layout(["model.diffusion_model.patch_embedding.weight"]) == "comfyui"
    assert detect_layout(["patch_embedding.weight", "condition_embedder.time_embedder.linear_1.weight"]) == "diffusers"
    assert detect_layout(["generator_ema.model._fsdp_wrapped_module.patch_embedding.weight"]) == "self_forcing"
    assert detect_layout(["module.model.patch_embedding.weight"]) == "self_forcing"
    assert detect_layout(["weights.patch_embedding.weight", "noise"]) == "fixture"
    with pytest.raises(CheckpointLayoutError, match=r"under the unknown prefix 'foo\.'"):
        detect_layout(["foo.patch_embedding.weight"])


# --- errors ------------------------------------------------------------------------------------------


def test_container_without_transformer(tmp_path):
    torch.save({"generator_ema": {"model.something.weight": torch.ones(2)}}, tmp_path / "model.pt")
    with pytest.raises(CheckpointLayoutError) as e:
        load_wan_checkpoint(tmp_path / "model.pt")
    msg = str(e.value)
    assert "'model.pt'" in msg and "'generator_ema.'" in msg and "no 'patch_embedding.weight'" in msg
    assert "Expected ComfyUI (model.diffusion_model.*" in msg and "Self-Forcing" in msg


@pytest.mark.parametrize(
    ("keys", "expect"),
    [
        (["encoder.conv1.weight", "decoder.conv1.weight", "conv2.weight"], "Wan VAE (keys encoder.*, decoder.*); put it in models/vae"),
        (["encoder.block.0.layer.0.SelfAttention.q.weight", "shared.weight"], "umT5 text encoder"),
        (["blocks.0.attn.q.weight", "token_embedding.weight"], "models/text_encoders"),
        (["diffusion_model.blocks.0.self_attn.q.lora_A.weight"], "LoRA"),
        (["visual.transformer.resblocks.0.attn.in_proj_weight", "log_scale"], "models/clip_vision"),
    ],
)  # fmt: skip
def test_wrong_folder(keys, expect, tmp_path):
    save_file({k: torch.ones(2) for k in keys}, str(tmp_path / "x.safetensors"))
    with pytest.raises(CheckpointLayoutError, match=r"'x\.safetensors' is not a Wan transformer") as e:
        load_wan_checkpoint(tmp_path / "x.safetensors")
    assert expect in str(e.value)


def test_vae_fixture_refused():
    with pytest.raises(CheckpointLayoutError, match=r"looks like a Wan VAE.*models/vae"):
        load_wan_checkpoint(FIXTURES / "wan_vae_tiny.safetensors")


@pytest.mark.parametrize("name", ["m.safetensors", "m.pt"])
def test_truncated(name, state, tmp_path):
    path = tmp_path / name
    save_wan_checkpoint(state, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointLayoutError, match=f"'{name}'.*truncated or corrupt"):
        load_wan_checkpoint(path, num_heads=4)


def test_not_a_weights_file(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(CheckpointLayoutError, match="neither a safetensors file nor a torch checkpoint"):
        load_wan_checkpoint(tmp_path / "m.safetensors")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointLayoutError, match="empty or truncated"):
        load_wan_checkpoint(tmp_path / "empty.pt")
    with pytest.raises(MissingFileError):
        load_wan_checkpoint(tmp_path / "nope.safetensors")


@dataclasses.dataclass
class TrainingArgs:  # stands for the OmegaConf/argparse objects that trainers pickle into checkpoints
    lr: float = 1e-5


def test_pickled_objects_refused(state, tmp_path):
    torch.save({"generator_ema": {f"model.{k}": v for k, v in state.items()}, "args": TrainingArgs()},
               tmp_path / "sf.pt")  # fmt: skip
    with pytest.raises(CheckpointLayoutError, match="never run pickled code") as e:
        load_wan_checkpoint(tmp_path / "sf.pt", num_heads=4)
    assert "TrainingArgs" in str(e.value)


def test_legacy_torch_format(state, tmp_path):
    torch.save(state, tmp_path / "old.pth", _use_new_zipfile_serialization=False)
    sd, _, info = load_wan_checkpoint(tmp_path / "old.pth", num_heads=4)
    assert_same(sd, state)
    assert info.file_format == "pt-legacy"


def test_missing_unexpected_wrong_shape(state, tmp_path):
    bad = dict(state)
    del bad["blocks.1.ffn.2.weight"]
    bad["blocks.0.self_attn.extra.weight"] = torch.ones(3)
    bad["blocks.0.cross_attn.o.bias"] = torch.ones(65)
    save_wan_checkpoint(bad, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointLayoutError) as e:
        load_wan_checkpoint(tmp_path / "m.safetensors", num_heads=4)
    msg = str(e.value)
    assert "missing (1): blocks.1.ffn.2.weight" in msg
    assert "unexpected (1): blocks.0.self_attn.extra.weight" in msg
    assert "wrong shape (1): blocks.0.cross_attn.o.bias [65] (expected [64])" in msg


def test_num_heads_required_for_non_wan_dims(state, tmp_path):
    save_wan_checkpoint(state, tmp_path / "m.safetensors")
    with pytest.raises(ConfigError, match="dim=64 is not a multiple of the Wan head size 128; pass num_heads"):
        load_wan_checkpoint(tmp_path / "m.safetensors")


def test_metadata_disagreeing_with_tensors(state, tmp_path):
    save_wan_checkpoint(state, tmp_path / "m.safetensors", config=dataclasses.replace(TINY, ffn_dim=256))
    with pytest.raises(CheckpointLayoutError, match="ffn_dim: file says 256, shapes say 128"):
        load_wan_checkpoint(tmp_path / "m.safetensors")


def i2v_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    sd = dict(state)
    sd["patch_embedding.weight"] = torch.randn(64, 36, 1, 2, 2)
    clip = 32
    sd |= {"img_emb.proj.0.weight": torch.ones(clip), "img_emb.proj.0.bias": torch.zeros(clip),
           "img_emb.proj.1.weight": torch.randn(clip, clip), "img_emb.proj.1.bias": torch.randn(clip),
           "img_emb.proj.3.weight": torch.randn(64, clip), "img_emb.proj.3.bias": torch.randn(64),
           "img_emb.proj.4.weight": torch.ones(64), "img_emb.proj.4.bias": torch.zeros(64)}  # fmt: skip
    for i in range(2):
        b = f"blocks.{i}.cross_attn"
        sd |= {f"{b}.k_img.weight": torch.randn(64, 64), f"{b}.k_img.bias": torch.randn(64),
               f"{b}.v_img.weight": torch.randn(64, 64), f"{b}.v_img.bias": torch.randn(64),
               f"{b}.norm_k_img.weight": torch.ones(64)}  # fmt: skip
    return sd


@pytest.mark.parametrize("layout", ["wan", "diffusers"])
def test_wan21_i2v_loads_and_flf2v_is_refused_unless_allowed(layout, state, tmp_path):
    sd = i2v_state(state)
    save_wan_checkpoint(sd, tmp_path / "i2v.safetensors", layout)
    got, cfg, info = load_wan_checkpoint(tmp_path / "i2v.safetensors", num_heads=4)
    assert cfg.model_type == "i2v" and cfg.has_image_input and cfg.in_dim == 36 and cfg.clip_dim == 32
    assert info.family_hints[0] == "i2v"
    assert_same(got, sd)
    flf = {**sd, "img_emb.emb_pos": torch.randn(1, 514, 32)}
    save_wan_checkpoint(flf, tmp_path / "flf2v.safetensors", layout)
    with pytest.raises(CheckpointLayoutError) as e:
        load_wan_checkpoint(tmp_path / "flf2v.safetensors", num_heads=4)
    assert "first-last-frame-to-video (flf2v)" in str(e.value) and "emb_pos" in str(e.value)
    _, cfg, _ = load_wan_checkpoint(tmp_path / "flf2v.safetensors", num_heads=4, allow_i2v=True)
    assert cfg.model_type == "flf2v"


def test_integer_quantised_weights_refused(state, tmp_path):
    sd = dict(state)
    sd["blocks.0.ffn.0.weight"] = torch.randint(-127, 127, (128, 64), dtype=torch.int8)
    save_wan_checkpoint(sd, tmp_path / "int8.safetensors")
    with pytest.raises(CheckpointLayoutError, match=r"stores 'blocks\.0\.ffn\.0\.weight' as int8"):
        load_wan_checkpoint(tmp_path / "int8.safetensors", num_heads=4)


def test_plain_fp8_and_scale_on_wider_weight(state, tmp_path):
    """fp8 without scales dequantises with scale 1; a scale beside a bf16 weight is still applied."""
    sd = {k: v.to(torch.float8_e4m3fn) if k.endswith("ffn.0.weight") else v for k, v in state.items()}
    sd["blocks.0.ffn.2.scale_weight"] = torch.tensor(0.5)
    save_wan_checkpoint(sd, tmp_path / "fp8.safetensors")
    got, _, info = load_wan_checkpoint(tmp_path / "fp8.safetensors", num_heads=4)
    assert info.quantization == "fp8_scaled" and "scale_weight" not in " ".join(got)
    assert torch.equal(got["blocks.1.ffn.0.weight"], sd["blocks.1.ffn.0.weight"].float())
    assert torch.equal(got["blocks.0.ffn.2.weight"], state["blocks.0.ffn.2.weight"] * 0.5)
    kept, _, _ = load_wan_checkpoint(tmp_path / "fp8.safetensors", num_heads=4, keep_fp8=True)
    assert kept["blocks.1.ffn.0.weight"].dtype == torch.float8_e4m3fn
    assert torch.equal(kept["blocks.1.ffn.0.scale_weight"], torch.tensor(1.0))


def test_unrelated_config_json_ignored(state, tmp_path, caplog):
    save_wan_checkpoint(state, tmp_path / "m.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 12, "attention_head_dim": 128}))
    with pytest.raises(ConfigError, match="pass num_heads"):
        load_wan_checkpoint(tmp_path / "m.safetensors")
    assert "describes dim=1536" in caplog.text
