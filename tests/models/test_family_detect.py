"""Family resolution from a file's content: tiny synthetic files with the key layouts of the released files.

Every file is called `model.pt` / `model.safetensors` inside folders with no family word in their names,
so only the content (or a file the authors ship beside it) can tell the family. Layouts, from the
authors' code (docs/models.md cites each):
* CausVid `autoregressive_checkpoint/model.pt`: {generator, critic} (causvid/train_distillation.py save,
  minimal_inference/autoregressive_inference.py loads ['generator']), keys `model.*`;
* Self-Forcing `self_forcing_dmd.pt`: {generator, critic, generator_ema} (trainer/distillation.py save);
* LongLive `longlive_base.pt` (same three dicts, LongLive trainer/distillation.py) + `lora.pt` {generator_lora: peft keys};
* Causal-Forcing `{framewise,chunkwise}/causal_forcing.pt`: the Self-Forcing layout; the ComfyUI repack
  `causal_forcing-framewise.safetensors`: bare Wan keys;
* Krea `krea-realtime-video-14b.safetensors`: flat `model.*` keys (release_server.load_transformer reads
  `model.blocks.0.self_attn.k.weight`), 14B dims.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError
from inferix_core.models.family_detect import FileFacts, detect_family
from inferix_core.models.registry import FAMILIES, load_world_model, resolve_family
from inferix_core.models.wan.checkpoint import load_wan_checkpoint, save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.shapes import expected_wan_shapes, infer_wan_config
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(
    dim=128, ffn_dim=64, freq_dim=16, text_dim=8, num_heads=1, num_layers=2
)  # dim/128 heads: .pt files carry no head count


def _prefixed(seed: int, prefix: str = "model.") -> dict[str, torch.Tensor]:
    return {prefix + k: v for k, v in random_wan_state_dict(CFG, seed=seed).items()}


def _plain_dir(tmp_path: Path) -> Path:
    d = tmp_path / "downloads" / "files"  # no family word in the path the rules can see
    d.mkdir(parents=True)
    return d


def _training_pt(path: Path, dicts: tuple[str, ...]) -> None:
    torch.save({name: _prefixed(seed=i + 1) for i, name in enumerate(dicts)}, path)


def test_causvid_model_pt_resolves_by_its_keys(tmp_path):
    path = _plain_dir(tmp_path) / "model.pt"
    _training_pt(path, ("generator", "critic"))
    wm = load_world_model(str(path), device="cpu")
    assert wm.family == "causvid" and "generator_ema" in wm.family_reason
    assert wm.sampling.shift == 8.0 and wm.sampling.denoising_steps == (1000, 757, 522)
    assert "'generator' weights" in wm.source
    torch.testing.assert_close(wm.transformer.state_dict()["head.head.weight"],
                               random_wan_state_dict(CFG, seed=1)["head.head.weight"])  # fmt: skip


def test_self_forcing_dmd_pt_resolves_to_self_forcing_with_ema(tmp_path):
    path = _plain_dir(tmp_path) / "model.pt"
    _training_pt(path, ("generator", "critic", "generator_ema"))
    wm = load_world_model(str(path), device="cpu")
    assert wm.family == "self_forcing" and "generator_ema" in wm.family_reason
    ema = random_wan_state_dict(CFG, seed=3)["head.head.weight"]  # generator_ema is the third dict
    torch.testing.assert_close(wm.transformer.state_dict()["head.head.weight"], ema)
    raw = load_world_model(str(path), device="cpu", weights="generator")
    torch.testing.assert_close(raw.transformer.state_dict()["head.head.weight"],
                               random_wan_state_dict(CFG, seed=1)["head.head.weight"])  # fmt: skip


def test_longlive_base_with_its_lora_beside_resolves_to_longlive_generator(tmp_path):
    d = _plain_dir(tmp_path)
    _training_pt(d / "model.pt", ("generator", "critic", "generator_ema"))
    lora = {"base_model.model.blocks.0.self_attn.q.lora_A.weight": torch.randn(4, CFG.dim),
            "base_model.model.blocks.0.self_attn.q.lora_B.weight": torch.randn(CFG.dim, 4)}  # fmt: skip
    torch.save({"generator_lora": lora}, d / "lora.pt")
    wm = load_world_model(str(d / "model.pt"), device="cpu")
    assert wm.family == "longlive" and "lora.pt" in wm.family_reason
    assert wm.default_cache.window_frames == 12 and wm.default_cache.sink_frames == 3
    # use_ema: false (configs/longlive_inference.yaml): the raw generator, not generator_ema
    torch.testing.assert_close(wm.transformer.state_dict()["head.head.weight"],
                               random_wan_state_dict(CFG, seed=1)["head.head.weight"])  # fmt: skip


def test_causal_forcing_needs_its_config_or_folder_name(tmp_path):
    d = _plain_dir(tmp_path)
    _training_pt(d / "model.pt", ("generator", "critic", "generator_ema"))
    (d / "inference.yaml").write_text("denoising_step_list: [1000, 750, 500, 250]\nnum_frame_per_block: 1\n")
    wm = load_world_model(str(d / "model.pt"), device="cpu")
    assert wm.family == "causal_forcing_framewise" and "inference.yaml" in wm.family_reason
    assert wm.sampling.block_frames == 1
    # the released layout: framewise/causal_forcing.pt and chunkwise/causal_forcing.pt
    for variant, block in (("framewise", 1), ("chunkwise", 3)):
        (tmp_path / variant).mkdir()
        _training_pt(tmp_path / variant / "causal_forcing.pt", ("generator", "critic", "generator_ema"))
        choice = resolve_family(str(tmp_path / variant / "causal_forcing.pt"))
        assert choice.family == f"causal_forcing_{variant}" and choice.stage == "file name"
        assert FAMILIES[choice.family].sampling.block_frames == block


def test_causal_forcing_plus_plus_config_picks_the_step_count(tmp_path):
    d = _plain_dir(tmp_path)
    _training_pt(d / "model.pt", ("generator", "generator_ema"))
    (d / "cf.yaml").write_text(
        "denoising_step_list: [1000, 500]\ndenoising_step_list_first_chunk: [1000, 750, 500, 250]\n"
        "num_frame_per_block: 1\n"
    )
    wm = load_world_model(str(d / "model.pt"), device="cpu")
    assert wm.family == "causal_forcing_framewise_2step"
    assert wm.sampling.first_block_denoising_steps == (1000, 750, 500, 250)


def test_comfyui_repack_of_causal_forcing_resolves_by_name(tmp_path):
    path = _plain_dir(tmp_path) / "causal_forcing-framewise.safetensors"
    save_wan_checkpoint(random_wan_state_dict(CFG, seed=0), path, layout="wan")
    wm = load_world_model(str(path), device="cpu")
    assert wm.family == "causal_forcing_framewise" and "name" in wm.family_reason


def test_wan_14b_dims_resolve_to_krea():
    """The weights rule on the real 14B shapes (a 14B file is too big to write in a test)."""
    cfg = WanConfig(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40)
    shapes = expected_wan_shapes(cfg)
    facts = FileFacts(Path("x/y/model.safetensors"), infer_wan_config(shapes), frozenset(shapes))
    choice = detect_family(facts, FAMILIES)
    assert choice.family == "krea" and choice.stage == "weights" and "5120" in choice.reason


def test_krea_layout_loads_and_its_family_settings(tmp_path):
    """Krea's file: flat safetensors with `model.` keys (release_server.load_transformer)."""
    path = _plain_dir(tmp_path) / "model.safetensors"
    save_file({k: v.contiguous() for k, v in _prefixed(seed=5).items()}, str(path))
    _state, _cfg, info = load_wan_checkpoint(path)
    assert info.layout == "self_forcing" and info.container_key is None
    wm = load_world_model(str(path), device="cpu", family="krea")
    assert wm.sampling.kv_recompute_frames == 3 and wm.sampling.denoising_steps == (1000, 750, 500, 250, 0)
    assert "family=krea was given" in wm.describe()


def test_no_evidence_says_so_and_names_the_input(tmp_path, caplog):
    path = _plain_dir(tmp_path) / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(CFG, seed=0), path, layout="comfyui")
    wm = load_world_model(str(path), device="cpu")
    assert wm.family == "self_forcing"
    assert wm.family_reason.startswith("no family evidence") and "set family=" in wm.family_reason
    assert "no family evidence" in wm.describe()
    assert any("no family evidence" in r.message for r in caplog.records)


def test_metadata_family_wins_over_the_name(tmp_path):
    path = _plain_dir(tmp_path) / "longlive_x.safetensors"
    sd = {k: v.contiguous() for k, v in random_wan_state_dict(CFG, seed=0).items()}
    save_file(sd, str(path), metadata={"inferix_family": "causvid"})
    assert resolve_family(str(path)).family == "causvid"


def test_explicit_family_and_weights_errors(tmp_path):
    path = _plain_dir(tmp_path) / "model.pt"
    _training_pt(path, ("generator",))
    with pytest.raises(ConfigError, match="unknown model family"):
        load_world_model(str(path), device="cpu", family="sora")
    with pytest.raises(ConfigError, match="unknown weights"):
        load_world_model(str(path), device="cpu", weights="best")
    with pytest.raises(CheckpointLayoutError, match=r"has no 'generator_ema'.*'generator'"):
        load_world_model(str(path), device="cpu", weights="ema")


def test_inferix_info_prints_family_and_reason(tmp_path, capsys):
    from inferix_core.cli import main

    path = _plain_dir(tmp_path) / "model.pt"
    _training_pt(path, ("generator", "critic"))
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "family: causvid" in out and "family chosen because:" in out and "generator_ema" in out


# --- diffusers folders ------------------------------------------------------------------------------


def _diffusers_root(tmp_path: Path) -> Path:
    root = _plain_dir(tmp_path) / "pipe"
    (root / "transformer").mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    save_wan_checkpoint(random_wan_state_dict(CFG, seed=2), root / "transformer" / "diffusion_pytorch_model.safetensors",
                        layout="diffusers", config=CFG)  # fmt: skip
    return root


def test_diffusers_pipeline_root_uses_its_transformer(tmp_path):
    root = _diffusers_root(tmp_path)
    state, cfg, info = load_wan_checkpoint(root)
    assert info.layout == "diffusers" and cfg.num_heads == CFG.num_heads and info.num_heads_source == "config.json"
    torch.testing.assert_close(state["head.head.weight"], random_wan_state_dict(CFG, seed=2)["head.head.weight"])
    assert load_world_model(str(root), device="cpu").config == cfg


@pytest.mark.parametrize("bad", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_shard_index_entries_stay_in_their_folder(tmp_path, bad):
    root = _diffusers_root(tmp_path)
    index = {"weight_map": {"patch_embedding.weight": bad, "proj_out.weight": "diffusion_pytorch_model.safetensors"}}
    (root / "transformer" / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointLayoutError, match="outside its folder"):
        load_wan_checkpoint(root)
