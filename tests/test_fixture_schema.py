"""Every tests/fixtures/*.safetensors follows the schema in tests/fixtures/README.md (the shared READMEs' schema).

Required keys present, shapes consistent with `config` / `pipeline`, the kind told by content. One test per file,
named by it, so a held-out fixture dropped into tests/fixtures is validated before any parity test runs it.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tests.fixture_schema import fixture_kind, strip_info, validate
from tests.fixture_utils import FIXTURES

FILES = sorted(FIXTURES.glob("*.safetensors"))


def _open(path):
    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
        assert "info" in meta, f"{path.name}: no `info` metadata entry"
        info = json.loads(meta["info"])
        return info, {k: f.get_slice(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fixture_follows_the_schema(path):
    info, tensors = _open(path)
    assert validate(path, info, tensors) == []
    for name, sl in tensors.items():
        assert sl.get_dtype() == "F32" or fixture_kind(info, tensors) == "other", f"{name} is {sl.get_dtype()}"


def test_the_schema_kinds_are_all_present():
    """The shared schema's kinds each have at least one fixture here (else their tests would run nothing)."""
    kinds = {fixture_kind(*_open(p)) for p in FILES}
    assert {"causal_wan", "matrix_game2", "action_module", "wan_vae"} <= kinds


def _tiny_run():
    cfg = dict(model_type="t2v", patch_size=[1, 2, 2], text_len=4, in_dim=16, dim=8, ffn_dim=16, freq_dim=4,
               text_dim=4, out_dim=16, num_heads=2, num_layers=1, qk_norm=True, cross_attn_norm=True, eps=1e-6)  # fmt: skip
    shape = [1, 3, 16, 4, 4]
    p = dict(denoising_step_list=[1000], warp_denoising_step=True, timestep_shift=5.0, num_train_timesteps=1000,
             scheduler={"num_inference_steps": 1000}, num_frame_per_block=3, context_noise=0, num_latent_frames=3,
             num_blocks=1, latent_shape=shape, independent_first_frame=False, local_attn_size=-1, sink_size=0,
             frame_seq_length=4, kv_cache_size_tokens=32760)  # fmt: skip
    info = {"config": cfg, "pipeline": p, "trace": {"model_calls": 2}, "weights_file": "x.safetensors"}
    z = torch.zeros(shape)
    t = {"noise": z, "output_latents": z, "text_context": torch.zeros(1, 4, 4), "scheduler.sigmas": z,
         "scheduler.timesteps": z, "sigmas_used": z, "timesteps_warped": torch.zeros(1)}  # fmt: skip
    t.update({f"block0.step0.{s}": z for s in ("input", "timestep", "flow_pred", "x0_pred")})
    return info, t


@pytest.mark.parametrize(
    "breakage",
    ["drop_pipeline_key", "frames_vs_blocks", "latent_shape", "kv_heads", "lora_rank", "missing_step"],
)
def test_validation_catches(tmp_path, breakage):
    """The validator is not vacuous: a valid tiny run passes, and each kind of inconsistency is reported."""
    (tmp_path / "x.safetensors").write_bytes(b"")
    info, t = _tiny_run()
    assert validate(tmp_path / "run.safetensors", info, t) == []
    p = info["pipeline"]
    if breakage == "drop_pipeline_key":
        del p["context_noise"]
    elif breakage == "frames_vs_blocks":
        p["num_blocks"] = 2
    elif breakage == "latent_shape":
        t["noise"] = torch.zeros(1, 4, 16, 4, 4)
    elif breakage == "kv_heads":
        t["kv_cache.layer0.after_block0.k"] = torch.zeros(1, 12, 4, 2)
    elif breakage == "lora_rank":
        info["lora"] = {"rank": 4, "alpha": 4}
        t["lora.base_model.model.blocks.0.self_attn.q.lora_A.weight"] = torch.zeros(2, 8)
    elif breakage == "missing_step":
        del t["block0.step0.x0_pred"]
    assert validate(tmp_path / "run.safetensors", info, t) != []


def test_strip_keeps_documented_keys_only():
    info, _ = _tiny_run()
    info.update(family="causvid", generator="gen.py", lora={"rank": 4, "alpha": 4, "file": "l.pt"})
    info["trace"]["calls"] = [{"label": "block0.step0", "start_frame": 0, "frames": 3, "timestep": 1000.0}]
    out = strip_info(info, "causal_wan")
    assert "family" not in out and "generator" not in out and out["lora"] == {"rank": 4, "alpha": 4}
    assert out["trace"]["calls"] == [{"label": "block0.step0", "current_start": 0, "num_frames": 3}]
