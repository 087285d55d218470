"""Inferix Load World Model LoRA: a new model out, the input (which ComfyUI caches) untouched, chainable."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from inferix_core.models.fp8 import count_fp8_linears
from tests.fixture_utils import tiny_loader_inputs

MODULES = ("blocks.0.self_attn.q", "blocks.1.ffn.0", "blocks.0.cross_attn.v")
RANK, ALPHA = 2, 5.0


def load(node_classes, fp8=False):
    (wm,) = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**tiny_loader_inputs(fp8=fp8))["result"]
    return wm


def write_lora(models_dir, name, state, seed):
    g = torch.Generator().manual_seed(seed)
    sd, fac = {}, {}
    for m in MODULES:
        out_f, in_f = state[f"{m}.weight"].shape
        a, b = torch.randn(RANK, in_f, generator=g) * 0.2, torch.randn(out_f, RANK, generator=g) * 0.2
        sd[f"diffusion_model.{m}.lora_down.weight"], sd[f"diffusion_model.{m}.lora_up.weight"] = a, b
        sd[f"diffusion_model.{m}.alpha"] = torch.tensor(ALPHA)
        fac[m] = (a, b)
    (models_dir / "loras").mkdir(exist_ok=True)
    save_file(sd, str(models_dir / "loras" / name))
    return fac


def lora_node(node_classes, wm, name, strength):
    return node_classes["InferixLoadWorldModelLoRA"]().EXECUTE_NORMALIZED(
        world_model=wm, lora_name=name, strength=strength
    )


def test_node_returns_a_new_model_and_leaves_the_input_untouched(node_classes, models_dir):
    wm = load(node_classes)
    base = {k: v.clone() for k, v in wm.transformer.state_dict().items()}
    fac = write_lora(models_dir, "style.safetensors", base, seed=1)
    out = lora_node(node_classes, wm, "style.safetensors", 0.5)
    (merged,) = out["result"]
    assert "style.safetensors" in out["ui"]["text"][0]
    assert merged is not wm and merged.transformer is not wm.transformer
    assert "LoRA style.safetensors:0.5" in merged.source and "LoRA" not in wm.source
    for k, v in wm.transformer.state_dict().items():
        assert torch.equal(v, base[k]), k
    new = merged.transformer.state_dict()
    for m, (a, b) in fac.items():
        expected = base[f"{m}.weight"].double() + 0.5 * ALPHA / RANK * (b.double() @ a.double())
        torch.testing.assert_close(new[f"{m}.weight"].double(), expected, atol=1e-5, rtol=0)
    assert torch.equal(new["blocks.1.self_attn.k.weight"], base["blocks.1.self_attn.k.weight"])
    assert merged.vae is wm.vae and merged.sampling == wm.sampling and merged.family == wm.family


def test_nodes_chain_and_stack(node_classes, models_dir):
    wm = load(node_classes)
    base = {k: v.clone() for k, v in wm.transformer.state_dict().items()}
    fa = write_lora(models_dir, "a.safetensors", base, seed=2)
    fb = write_lora(models_dir, "b.safetensors", base, seed=3)
    (one,) = lora_node(node_classes, wm, "a.safetensors", 1.0)["result"]
    (two,) = lora_node(node_classes, one, "b.safetensors", -0.7)["result"]
    new = two.transformer.state_dict()
    for m in MODULES:
        (a1, b1), (a2, b2) = fa[m], fb[m]
        expected = base[f"{m}.weight"].double() + ALPHA / RANK * (
            b1.double() @ a1.double() - 0.7 * b2.double() @ a2.double()
        )
        torch.testing.assert_close(new[f"{m}.weight"].double(), expected, atol=1e-5, rtol=0)


def test_fp8_input_stays_fp8(node_classes, models_dir):
    wm = load(node_classes, fp8=True)
    n = count_fp8_linears(wm.transformer)
    assert n > 0
    write_lora(models_dir, "a.safetensors", load(node_classes).transformer.state_dict(), seed=4)
    (merged,) = lora_node(node_classes, wm, "a.safetensors", 1.0)["result"]
    assert count_fp8_linears(merged.transformer) == n
    assert not torch.equal(
        merged.transformer.blocks[0].self_attn.q.weight.float(), wm.transformer.blocks[0].self_attn.q.weight.float()
    )


def test_missing_lora_file_is_a_validation_message(node_classes, models_dir):
    message = node_classes["InferixLoadWorldModelLoRA"].VALIDATE_INPUTS(lora_name="nope.safetensors")
    assert isinstance(message, str) and "models/loras" in message


def test_play_reads_the_lora_nodes_of_a_workflow(models_dir):
    from inferix_core.commands.play import _workflow_loras

    (models_dir / "loras").mkdir()
    (models_dir / "loras" / "x.safetensors").write_bytes(b"")
    graph = {
        "1": {"class_type": "InferixLoadWorldModel", "inputs": {"model": "bundled"}},
        "2": {"class_type": "InferixLoadWorldModelLoRA", "inputs": {"world_model": ["1", 0], "lora_name": "x.safetensors", "strength": 0.25}},
    }  # fmt: skip
    assert _workflow_loras(graph) == [(str(models_dir / "loras" / "x.safetensors"), 0.25)]
    with pytest.raises(FileNotFoundError):
        _workflow_loras({"3": {"class_type": "InferixLoadWorldModelLoRA", "inputs": {"lora_name": "gone.pt"}}})
