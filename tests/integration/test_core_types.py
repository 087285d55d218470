"""Core ComfyUI types in and out, on a real server: a core MODEL (with a core LoRA) on our engine, our VIDEO
into core Save Video / Get Video Components / Create Video.

Skipped unless COMFYUI_DIR and COMFYUI_PYTHON are set (conftest.py). Runs on v0.3.64 and v0.27
(docs/comfyui_integration.md). The model files are tiny random stand-ins written into the server's models/.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.test_all_workflows import _tiny_umt5

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CAUSAL = "inferix_it_causal.safetensors"  # core loads it as WAN21_CausalAR (metadata causal_ar)
MERGED = "inferix_it_merged.safetensors"  # the same weights with the LoRA merged in closed form
LORA = "inferix_it_lora.safetensors"
VAE = "wan_vae_tiny.safetensors"
UMT5 = "inferix_it_umt5.safetensors"
RANK, ALPHA, STRENGTH = 4, 2.0, 0.8
LORA_LAYERS = ("self_attn.q", "self_attn.o", "cross_attn.v", "ffn.0")
SEED = 4242


def _write_wan(path: Path, state: dict, cfg) -> None:
    """A ComfyUI-layout Wan file whose metadata both ComfyUI (`transformer`) and our loader (top level) read."""
    import torch
    from safetensors.torch import save_file

    transformer = {  # comfy/model_detection.py: dit_config.update(metadata config["transformer"])
        "causal_ar": True,
        "num_heads": cfg.num_heads,
        "freq_dim": cfg.freq_dim,
        "text_dim": cfg.text_dim,
        "text_len": cfg.text_len,
    }
    ours = {k: v for k, v in cfg.to_dict().items() if k != "extra"}
    meta = {"format": "pt", "config": json.dumps({**ours, "transformer": transformer})}
    save_file(
        {f"model.diffusion_model.{k}": v.to(torch.float32).contiguous() for k, v in state.items()}, str(path), meta
    )


@pytest.fixture(scope="module")
def core_files(comfyui, tmp_path_factory) -> dict:
    """Tiny causal Wan (+ its LoRA-merged twin), a LoRA in ComfyUI's key format, the tiny VAE and umT5."""
    import torch
    from safetensors.torch import save_file

    from inferix_core.models.wan.config import WanConfig
    from tests.models.wan_state import random_wan_state_dict

    models = comfyui.base_dir / "models"
    for sub in ("diffusion_models", "loras", "vae", "text_encoders"):
        (models / sub).mkdir(parents=True, exist_ok=True)
    # sizes v0.3.64 can load too: it ignores the metadata and reads num_heads = dim / 128, freq_dim 256 and
    # WanModel's defaults text_dim 4096, text_len 512 (v0.27 reads the metadata's `transformer` entries)
    cfg = WanConfig(dim=128, ffn_dim=64, freq_dim=256, text_dim=4096, text_len=512, num_heads=1, num_layers=2)
    state = random_wan_state_dict(cfg, seed=11)
    g = torch.Generator().manual_seed(12)
    lora, merged = {}, dict(state)
    for block in range(cfg.num_layers):
        for layer in LORA_LAYERS:
            key = f"blocks.{block}.{layer}"
            out_f, in_f = state[f"{key}.weight"].shape
            up, down = torch.randn(out_f, RANK, generator=g) * 0.3, torch.randn(RANK, in_f, generator=g) * 0.3
            lora |= {
                f"diffusion_model.{key}.lora_up.weight": up,
                f"diffusion_model.{key}.lora_down.weight": down,
                f"diffusion_model.{key}.alpha": torch.tensor(ALPHA),
            }
            # comfy/lora.py: W + strength · (alpha / rank) · up @ down
            merged[f"{key}.weight"] = state[f"{key}.weight"] + STRENGTH * (ALPHA / RANK) * (up @ down)
    _write_wan(models / "diffusion_models" / CAUSAL, state, cfg)
    _write_wan(models / "diffusion_models" / MERGED, merged, cfg)
    save_file(lora, str(models / "loras" / LORA))
    shutil.copyfile(FIXTURES / VAE, models / "vae" / VAE)
    _tiny_umt5(models / "text_encoders" / UMT5, tmp_path_factory.mktemp("spm_core"), d_model=cfg.text_dim)
    return {"models": models}


def run_prompt(comfyui, workflow: dict, timeout: float = 600) -> dict:
    """POST /prompt and wait for its /history entry; returns it (fails with the server's error)."""
    status, body = comfyui.post_json("/prompt", {"prompt": workflow, "client_id": uuid.uuid4().hex})
    assert status == 200, f"prompt refused: {body}"
    prompt_id = body["prompt_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = comfyui.get_json(f"/history/{prompt_id}")
        if prompt_id in history and history[prompt_id].get("status", {}).get("completed") is not None:
            return history[prompt_id]
        time.sleep(0.5)
    pytest.fail(f"prompt {prompt_id} did not finish in {timeout} s:\n{comfyui.log_tail()}")


def _error(entry: dict) -> str:
    for kind, data in entry.get("status", {}).get("messages", []):
        if kind == "execution_error":
            return data.get("exception_message", "")
    return ""


def _denoise(world_model_link: list) -> dict:
    return {
        "class_type": "InferixBlockDenoise",
        "inputs": {
            "world_model": world_model_link,
            "prompt": "a car drives along the coastal road at sunset",
            "num_blocks": 2,
            "seconds": 0.0,
            "width": 64,
            "height": 64,
            "denoising_steps": "1000,750,500,250",
            "seed": SEED,
        },
    }


def _core_graph(prefix: str, lora: bool, extra: dict | None = None) -> dict:
    model_link = ["2", 0] if lora else ["1", 0]
    graph = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": CAUSAL, "weight_dtype": "default"}},
        "4": {
            "class_type": "InferixWorldModelFromCoreModel",
            "inputs": {
                "model": model_link,
                "vae_name": VAE,  # the tiny VAE fixture is too small for core's Wan VAE loader
                "family": "self_forcing",
                "text_encoder": UMT5,
                "dtype": "fp32",
                "attention": "sdpa",
            },
        },
        "5": _denoise(["4", 0]),
        "6": {"class_type": "SaveLatent", "inputs": {"samples": ["5", 0], "filename_prefix": prefix}},
    }
    if lora:
        graph["2"] = {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": STRENGTH},
        }
    graph.update(extra or {})
    return graph


def _saved_latent(comfyui, entry: dict, node: str):
    from safetensors.torch import load_file

    [saved] = entry["outputs"][node]["latents"]
    path = comfyui.output_dir / saved["subfolder"] / saved["filename"]
    return load_file(str(path))["latent_tensor"]


def test_core_model_with_core_lora_gives_our_loaders_frames(comfyui, core_files):
    """UNETLoader → LoraLoaderModelOnly → World Model from ComfyUI MODEL equals our loader on the merged file."""
    import torch

    tag = uuid.uuid4().hex[:6]
    core = run_prompt(comfyui, _core_graph(f"inferix_it/core_{tag}", lora=True))
    assert not _error(core), _error(core) + "\n" + comfyui.log_tail()
    ours_graph = {
        "1": {
            "class_type": "InferixLoadWorldModel",
            "inputs": {
                "model": MERGED,
                "vae": VAE,
                "preview_decoder": "none",
                "text_encoder": UMT5,
                "dtype": "fp32",
                "attention": "sdpa",
                "device": "auto",
            },
        },
        "5": _denoise(["1", 0]),
        "6": {"class_type": "SaveLatent", "inputs": {"samples": ["5", 0], "filename_prefix": f"inferix_it/ours_{tag}"}},
    }
    ours = run_prompt(comfyui, ours_graph)
    assert not _error(ours), _error(ours)
    plain = run_prompt(comfyui, _core_graph(f"inferix_it/plain_{tag}", lora=False))
    assert not _error(plain), _error(plain)
    a, b, c = (_saved_latent(comfyui, e, "6") for e in (core, ours, plain))
    assert a.shape == b.shape and a.ndim == 5 and torch.isfinite(a).all()
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), f"max diff {float((a - b).abs().max())}\n{comfyui.log_tail()}"
    assert float((a - c).abs().max()) > 1e-2  # the LoRA changed the frames: it was not ignored
    assert "core MODEL (WAN21_CausalAR)" in json.dumps(core["outputs"]["4"]) or "WAN21" in comfyui.log_tail(400)


def test_core_model_with_a_forward_wrapper_is_refused(comfyui, core_files):
    """TorchCompileModel wraps the forward: our engine cannot honour it, and says so."""
    extra = {"7": {"class_type": "TorchCompileModel", "inputs": {"model": ["1", 0], "backend": "inductor"}}}
    graph = _core_graph(f"inferix_it/refused_{uuid.uuid4().hex[:6]}", lora=False, extra=extra)
    graph["4"]["inputs"]["model"] = ["7", 0]
    entry = run_prompt(comfyui, graph)
    message = _error(entry)
    assert "cannot run on the Inferix engine" in message and "wrappers" in message, message


def test_our_video_into_core_save_video_and_components(comfyui, tmp_path):
    """Block Denoise's VIDEO → Save Video, and → Get Video Components → Create Video → Save Video."""
    from tests.integration.test_run_vs_queue import decode

    tag = uuid.uuid4().hex[:6]
    graph = {
        "1": {
            "class_type": "InferixLoadWorldModel",
            "inputs": {
                "model": "bundled",
                "vae": "bundled",
                "preview_decoder": "none",
                "text_encoder": "bundled",
                "dtype": "auto",
                "attention": "sdpa",
                "device": "auto",
            },
        },
        "2": _denoise(["1", 0]),
        "3": {
            "class_type": "SaveVideo",
            "inputs": {
                "video": ["2", 3],
                "filename_prefix": f"inferix_it/video_{tag}",
                "format": "mp4",
                "codec": "h264",
            },
        },
        "4": {"class_type": "GetVideoComponents", "inputs": {"video": ["2", 3]}},
        "5": {"class_type": "CreateVideo", "inputs": {"images": ["4", 0], "fps": ["4", 2]}},
        "6": {
            "class_type": "SaveVideo",
            "inputs": {
                "video": ["5", 0],
                "filename_prefix": f"inferix_it/again_{tag}",
                "format": "mp4",
                "codec": "h264",
            },
        },
        "7": {"class_type": "PreviewImage", "inputs": {"images": ["2", 1]}},
    }
    entry = run_prompt(comfyui, graph)
    assert not _error(entry), _error(entry) + "\n" + comfyui.log_tail()
    num_frames = len(entry["outputs"]["7"]["images"])
    assert num_frames > 1
    for node in ("3", "6"):
        [saved] = next(v for v in entry["outputs"][node].values() if isinstance(v, list))
        video = decode(comfyui.output_dir / saved["subfolder"] / saved["filename"])
        assert video.shape[0] == num_frames and video.shape[1:3] == (64, 64)
