"""LoRA reading and merging: every format against the float64 closed form W + s·α/r·B@A.

Fresh random tensors everywhere; alpha differs from the rank so that a dropped (or inverted) scale shows.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.errors import CheckpointLayoutError, ConfigError, ShapeMismatchError
from inferix_core.models.lora import (
    LoraSpec,
    as_lora_specs,
    merge_lora_files,
    merge_loras_into_transformer,
    parse_lora_arg,
    read_lora,
)
from inferix_core.models.wan.checkpoint import load_wan_checkpoint, save_wan_checkpoint
from inferix_core.models.wan.config import WanConfig
from inferix_core.models.wan.layouts import from_canonical
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(dim=32, ffn_dim=48, freq_dim=16, text_dim=24, num_heads=2, num_layers=2, text_len=8)
RANK, ALPHA = 4, 3.0  # scale 0.75
MODULES = ("blocks.0.self_attn.q", "blocks.1.cross_attn.o", "blocks.0.ffn.0", "blocks.1.ffn.2", "head.head")


@pytest.fixture
def base():
    return random_wan_state_dict(CFG, seed=11)


def factors(base, seed=0, modules=MODULES, rank=RANK):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in modules:
        w = base[f"{m}.weight"]
        out[m] = (torch.randn(rank, w.shape[1], generator=g) * 0.3, torch.randn(w.shape[0], rank, generator=g) * 0.3)
    return out


def closed_form(base, lora_sets):
    """float64: W + Σ strength · scale · B @ A."""
    out = {k: v.double() for k, v in base.items()}
    for fac, strength, scale in lora_sets:
        for m, (a, b) in fac.items():
            out[f"{m}.weight"] += strength * scale * (b.double() @ a.double())
    return out


def assert_merged(merged, expected, atol=1e-5):
    assert set(merged) == set(expected)
    for k, v in expected.items():
        assert torch.isfinite(merged[k]).all(), k
        torch.testing.assert_close(merged[k].double(), v, atol=atol, rtol=0, msg=k)


# --- writers: one per on-disk format ---------------------------------------------------------------------


def write_peft(path, fac, *, container=True, adapter_name=False, alpha_config=True):
    ad = ".default" if adapter_name else ""
    sd = {}
    for m, (a, b) in fac.items():
        sd[f"base_model.model.{m}.lora_A{ad}.weight"] = a
        sd[f"base_model.model.{m}.lora_B{ad}.weight"] = b
    torch.save({"generator_lora": sd, "critic_lora": {"x.lora_A.weight": a}, "step": 7} if container else sd, path)
    if alpha_config:
        (path.parent / "adapter_config.json").write_text(json.dumps({"r": RANK, "lora_alpha": ALPHA}))
    return path


def write_comfy(path, fac, *, ab=False):
    sd = {}
    for m, (a, b) in fac.items():
        down, up = ("lora_A", "lora_B") if ab else ("lora_down", "lora_up")
        sd[f"diffusion_model.{m}.{down}.weight"] = a
        sd[f"diffusion_model.{m}.{up}.weight"] = b
        sd[f"diffusion_model.{m}.alpha"] = torch.tensor(ALPHA)
    save_file(sd, str(path))
    return path


def write_kohya(path, fac):
    sd = {}
    for m, (a, b) in fac.items():
        n = "lora_unet_" + m.replace(".", "_")
        sd[f"{n}.lora_down.weight"], sd[f"{n}.lora_up.weight"], sd[f"{n}.alpha"] = a, b, torch.tensor(ALPHA)
    save_file(sd, str(path))
    return path


def write_diffusers(path, fac):
    sd = {}
    for m, (a, b) in fac.items():
        n = "transformer." + from_canonical(f"{m}.weight", "diffusers")[: -len(".weight")]
        sd[f"{n}.lora_A.weight"], sd[f"{n}.lora_B.weight"] = a, b
    meta = {"lora_adapter_metadata": json.dumps({"transformer.r": RANK, "transformer.lora_alpha": ALPHA})}
    save_file(sd, str(path), metadata=meta)
    return path


WRITERS = {
    "peft_generator_lora": lambda p, f: write_peft(p / "lora.pt", f),
    "peft_bare_adapter_name": lambda p, f: write_peft(p / "lora.pt", f, container=False, adapter_name=True),
    "comfyui_down_up": lambda p, f: write_comfy(p / "lora.safetensors", f),
    "comfyui_lora_ab": lambda p, f: write_comfy(p / "lora.safetensors", f, ab=True),
    "kohya": lambda p, f: write_kohya(p / "lora.safetensors", f),
    "diffusers": lambda p, f: write_diffusers(p / "lora.safetensors", f),
}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_each_format_merges_to_the_closed_form(fmt, base, tmp_path):
    fac = factors(base, seed=1)
    path = WRITERS[fmt](tmp_path, fac)
    merged = merge_lora_files(base, [(str(path), 0.8)])
    assert_merged(merged, closed_form(base, [(fac, 0.8, ALPHA / RANK)]))
    untouched = "blocks.0.self_attn.k.weight"
    assert merged[untouched] is base[untouched]  # only merged tensors are new
    assert not torch.equal(merged["blocks.0.self_attn.q.weight"], base["blocks.0.self_attn.q.weight"])


def test_longlive_lora_without_alpha_uses_scale_one(base, tmp_path):
    """LongLive's lora.pt has no alpha and no adapter_config.json: its authors train with alpha = rank."""
    fac = factors(base, seed=2)
    path = write_peft(tmp_path / "lora.pt", fac, alpha_config=False)
    lora = read_lora(path)
    assert (lora.format, lora.container_key, lora.alpha_source) == ("peft", "generator_lora", "none (alpha = rank)")
    assert_merged(merge_lora_files(base, [str(path)]), closed_form(base, [(fac, 1.0, 1.0)]))


def test_rslora_scale_from_adapter_config(base, tmp_path):
    fac = factors(base, seed=3)
    path = write_peft(tmp_path / "lora.pt", fac)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": RANK, "lora_alpha": ALPHA, "use_rslora": True}))
    assert_merged(merge_lora_files(base, [str(path)]), closed_form(base, [(fac, 1.0, ALPHA / math.sqrt(RANK))]))


def test_several_loras_stack(base, tmp_path):
    fa, fb = factors(base, seed=4), factors(base, seed=5, modules=MODULES[:3])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pa = write_comfy(tmp_path / "a" / "a.safetensors", fa)
    pb = write_kohya(tmp_path / "b" / "b.safetensors", fb)
    merged = merge_lora_files(base, [(str(pa), 0.7), LoraSpec(str(pb), -0.3)])
    assert_merged(merged, closed_form(base, [(fa, 0.7, ALPHA / RANK), (fb, -0.3, ALPHA / RANK)]))


def test_strength_zero_is_identity(base, tmp_path):
    path = write_comfy(tmp_path / "l.safetensors", factors(base, seed=6))
    merged = merge_lora_files(base, [(str(path), 0.0)])
    assert all(merged[k] is base[k] for k in base)


def test_full_diffs(base, tmp_path):
    g = torch.Generator().manual_seed(7)
    dw = torch.randn(CFG.dim, generator=g)
    db = torch.randn(CFG.dim, generator=g)
    dm = torch.randn(1, 6, CFG.dim, generator=g)
    save_file(
        {
            "diffusion_model.blocks.0.norm3.diff": dw,
            "diffusion_model.blocks.0.self_attn.q.diff_b": db,
            "diffusion_model.blocks.1.modulation.diff": dm,
        },
        str(tmp_path / "d.safetensors"),
    )
    merged = merge_lora_files(base, [(str(tmp_path / "d.safetensors"), 0.5)])
    expected = {k: v.double() for k, v in base.items()}
    expected["blocks.0.norm3.weight"] += 0.5 * dw.double()
    expected["blocks.0.self_attn.q.bias"] += 0.5 * db.double()
    expected["blocks.1.modulation"] += 0.5 * dm.double()
    assert_merged(merged, expected)


def test_unmatched_keys_are_an_error_naming_them(base, tmp_path):
    fac = factors(base, seed=8)
    a, b = fac["blocks.0.self_attn.q"]
    fac["blocks.7.self_attn.q"] = (a.clone(), b.clone())  # a 2-layer model has no block 7
    fac["blocks.0.cross_attn.k_img"] = (a.clone(), b.clone())  # an I2V module
    path = write_comfy(tmp_path / "other.safetensors", fac)
    with pytest.raises(CheckpointLayoutError, match=r"2 of its 7 modules match no weight.*blocks\.7\.self_attn\.q"):
        merge_lora_files(base, [str(path)])


def test_shape_mismatch_names_both_shapes(base, tmp_path):
    big = {"blocks.0.self_attn.q": (torch.randn(RANK, 64), torch.randn(64, RANK))}  # a LoRA for dim 64
    path = write_comfy(tmp_path / "big.safetensors", big)
    with pytest.raises(ShapeMismatchError, match=r"\(64, 64\).*\(32, 32\)"):
        merge_lora_files(base, [str(path)])


def test_not_a_lora_and_pickled_code_are_refused(base, tmp_path):
    save_file({"blocks.0.self_attn.q.weight": torch.randn(32, 32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointLayoutError, match="no LoRA weights"):
        read_lora(tmp_path / "model.safetensors")
    torch.save({"generator_lora": {"a.lora_A.weight": torch.ones(1, 1)}, "cfg": ConfigError("x")}, tmp_path / "p.pt")
    with pytest.raises(CheckpointLayoutError, match="never run pickled code"):
        read_lora(tmp_path / "p.pt")


def test_fp8_scaled_base_is_dequantized_merged_and_kept_in_compute_dtype(base, tmp_path):
    save_wan_checkpoint(base, tmp_path / "fp8.safetensors", "comfyui", config=CFG, fp8_scaled=True)
    state, _, info = load_wan_checkpoint(tmp_path / "fp8.safetensors", keep_fp8=True)
    assert info.quantization == "fp8_scaled"
    fac = factors(base, seed=9)
    path = write_comfy(tmp_path / "l.safetensors", fac)
    merged = merge_lora_files(state, [(str(path), 1.0)], dtype=torch.bfloat16)
    deq = {
        k: (v.double() * state[k.removesuffix("weight") + "scale_weight"].double() if v.dtype.itemsize == 1 else v)
        for k, v in state.items()
        if not k.endswith("scale_weight")
    }
    expected = closed_form(deq, [(fac, 1.0, ALPHA / RANK)])
    fp8_keys = [f"{m}.weight" for m in fac if state[f"{m}.weight"].dtype == torch.float8_e4m3fn]
    assert len(fp8_keys) == 4  # the block linears; head.head is stored in full precision
    for m in fac:
        k = f"{m}.weight"
        assert merged[k].dtype == (torch.bfloat16 if k in fp8_keys else state[k].dtype)
        assert f"{m}.scale_weight" not in merged
        torch.testing.assert_close(merged[k].double(), expected[k], atol=2e-2, rtol=1e-2)
    with pytest.raises(ConfigError, match="compute dtype"):
        merge_lora_files(state, [str(path)])


def test_bf16_base_is_merged_in_float32_and_rounded_once(base, tmp_path):
    bf = {k: v.bfloat16() for k, v in base.items()}
    fac = factors(base, seed=10)
    path = write_kohya(tmp_path / "l.safetensors", fac)
    merged = merge_lora_files(bf, [(str(path), 1.0)])
    expected = closed_form(bf, [(fac, 1.0, ALPHA / RANK)])
    for m in fac:
        k = f"{m}.weight"
        assert merged[k].dtype == torch.bfloat16
        # one rounding of the exact sum: within half a bf16 ulp (2^-8 relative) of it
        err = (merged[k].double() - expected[k]).abs()
        assert (err <= expected[k].abs() * 2**-8 + 1e-30).all()


def test_load_world_model_merges_before_building(base, tmp_path):
    from inferix_core.models.registry import load_world_model

    save_wan_checkpoint(base, tmp_path / "model.safetensors", "comfyui", config=CFG)
    fac = factors(base, seed=12)
    path = write_peft(tmp_path / "lora.pt", fac)
    wm = load_world_model(str(tmp_path / "model.safetensors"), device="cpu", dtype="fp32", lora=[(str(path), 0.5)])
    assert "lora.pt:0.5" in wm.source
    assert_merged(wm.transformer.state_dict(), closed_form(base, [(fac, 0.5, ALPHA / RANK)]))


def test_transformer_copy_leaves_the_input_untouched(base, tmp_path):
    from inferix_core.models.wan.causal_transformer import CausalWanTransformer

    model = CausalWanTransformer(CFG)
    model.load_state_dict(base)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fac = factors(base, seed=13)
    new = merge_loras_into_transformer(model, [(str(write_comfy(tmp_path / "l.safetensors", fac)), 1.0)])
    assert new is not model
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert_merged(new.state_dict(), closed_form(base, [(fac, 1.0, ALPHA / RANK)]))
    k = "blocks.0.self_attn.k.weight"  # untouched weights are shared, not copied
    assert new.state_dict()[k].data_ptr() == model.state_dict()[k].data_ptr()


def test_cli_strength_parsing():
    assert parse_lora_arg("loras/a.safetensors:0.5") == LoraSpec("loras/a.safetensors", 0.5)
    assert parse_lora_arg("a.safetensors") == LoraSpec("a.safetensors", 1.0)
    assert parse_lora_arg("a.pt:-1") == LoraSpec("a.pt", -1.0)
    assert parse_lora_arg(r"C:\loras\a.safetensors") == LoraSpec(r"C:\loras\a.safetensors", 1.0)
    assert parse_lora_arg(r"C:\loras\a.safetensors:2") == LoraSpec(r"C:\loras\a.safetensors", 2.0)
    with pytest.raises(ConfigError, match="finite"):
        parse_lora_arg("a.pt:nan")
    assert as_lora_specs(["x.pt", ("y.pt", 0.2)]) == (LoraSpec("x.pt"), LoraSpec("y.pt", 0.2))


@pytest.mark.parametrize("command", ["info", "play"])
def test_cli_lora_flag_is_repeatable(command):
    from inferix_core.cli import build_parser

    args = build_parser().parse_args([command, "model.pt", "--lora", "a.pt:0.8", "--lora", "b.safetensors"])
    assert args.lora == [LoraSpec("a.pt", 0.8), LoraSpec("b.safetensors", 1.0)]
    assert build_parser().parse_args([command]).lora == []


@pytest.mark.cuda
def test_merge_on_the_gpu_equals_the_cpu_merge(base, tmp_path):
    """load_world_model merges on the model's device; the float32 result is the CPU one, returned on CPU."""
    bf = {k: v.bfloat16() for k, v in base.items()}
    path = write_kohya(tmp_path / "l.safetensors", factors(base, seed=14))
    cpu = merge_lora_files(bf, [(str(path), 0.9)])
    gpu = merge_lora_files(bf, [(str(path), 0.9)], device="cuda")
    for k in cpu:
        assert gpu[k].device.type == "cpu" and gpu[k].dtype == cpu[k].dtype
        torch.testing.assert_close(gpu[k], cpu[k], atol=0, rtol=2**-7)  # TF32/matmul order: one bf16 ulp at most


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_load_world_model_with_an_fp8_scaled_file(base, tmp_path, dtype):
    """A ComfyUI fp8-scaled checkpoint: dequantized with its scales, merged, kept in the compute dtype."""
    from inferix_core.models.registry import load_world_model

    save_wan_checkpoint(base, tmp_path / "fp8.safetensors", "comfyui", config=CFG, fp8_scaled=True)
    deq, _, _ = load_wan_checkpoint(tmp_path / "fp8.safetensors", dtype=torch.float64)
    fac = factors(base, seed=15)
    path = write_comfy(tmp_path / "l.safetensors", fac)
    wm = load_world_model(str(tmp_path / "fp8.safetensors"), device="cpu", dtype=dtype, lora=[(str(path), 1.0)])
    expected = closed_form(deq, [(fac, 1.0, ALPHA / RANK)])
    got = wm.transformer.state_dict()
    tol = 1e-5 if dtype == "fp32" else 2e-3
    for m in fac:
        assert got[f"{m}.weight"].dtype == (torch.float16 if dtype == "fp16" else torch.float32)
        torch.testing.assert_close(got[f"{m}.weight"].double(), expected[f"{m}.weight"], atol=tol, rtol=tol)
