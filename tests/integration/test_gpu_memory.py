"""On a GPU: our world model and a large core model in one workflow, under a memory limit that fits each alone.

The limit is real: this test process holds a "ballast" CUDA allocation so that the GPU has only BUDGET_GB
free for the server (ComfyUI reads free memory with torch.cuda.mem_get_info, device-wide). The workflow:
core CLIPLoader (a random UMT5-XXL in ComfyUI's key layout, ~11.4 GB bf16) → CLIPTextEncode → Inferix Block
Denoise's `conditioning`, with Inferix Load World Model on a random Wan 2.1 1.3B-shaped causal transformer
(~2.8 GB bf16). Both fit alone, not together: the run completes only if ComfyUI unloads (all or part of) the
text encoder for our model (Load World Model's free_memory, Block Denoise's load_models_gpu), which the
server's log shows ("Unloading ..." at DEBUG, "Unloaded partially", "N models unloaded.", or our
"asked ComfyUI for ... model(s) unloaded").

    COMFYUI_DIR=/work/comfyui-0.27 COMFYUI_PYTHON=/work/comfyui-venv-0.27/bin/python \\
        python -m pytest tests/integration/test_gpu_memory.py -v -rs   # ~1 min on an H100

bench/run_gpu_memory.sh runs it on a GPU machine without network, on ComfyUI v0.3.64 and v0.27.

Needs CUDA in this process and the server's; the random files are written under the test's tmp dir.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.integration, pytest.mark.cuda, pytest.mark.slow]

# ComfyUI wants size × 1.1 + 1.2 GB (inference + reserved) free to load a model fully: the 11.4 GB text
# encoder needs 13.7 GB, our 2.8 GB world model about 4.3 GB (+ its KV cache); 15 GB fits either, not both
BUDGET_GB = 15.0
UMT5_XXL = {"d_model": 4096, "d_ff": 10240, "num_layers": 24, "num_heads": 64, "d_kv": 64, "vocab": 256384}


def _random_umt5_xxl(path, work) -> None:
    """UMT5-XXL encoder weights (random, bf16) under the names ComfyUI's T5 loader reads, with a small
    SentencePiece model as `spiece_model` (ComfyUI's Wan tokenizer reads it from the file)."""
    from safetensors.torch import save_file

    spm = pytest.importorskip("sentencepiece")
    words = ["car", "road", "coastal", "sunset", "snow", "night", "mountain", "drives", "along", "the", "a"]
    (work / "corpus.txt").write_text(
        "\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(300))
    )
    spm.SentencePieceTrainer.train(
        input=str(work / "corpus.txt"), model_prefix=str(work / "spiece"), vocab_size=30, pad_id=0, eos_id=1,
        unk_id=2, bos_id=-1, model_type="unigram", minloglevel=2,
    )  # fmt: skip

    c, g = UMT5_XXL, torch.Generator(device="cuda").manual_seed(0)
    inner = c["num_heads"] * c["d_kv"]

    def w(*shape):
        return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16) * 0.02).cpu()

    sd = {"shared.weight": w(c["vocab"], c["d_model"]), "encoder.final_layer_norm.weight": w(c["d_model"]) + 1}
    for i in range(c["num_layers"]):
        b = f"encoder.block.{i}.layer"
        for n in ("q", "k", "v"):
            sd[f"{b}.0.SelfAttention.{n}.weight"] = w(inner, c["d_model"])
        sd[f"{b}.0.SelfAttention.o.weight"] = w(c["d_model"], inner)
        sd[f"{b}.0.SelfAttention.relative_attention_bias.weight"] = w(32, c["num_heads"])
        sd[f"{b}.0.layer_norm.weight"] = w(c["d_model"]) + 1
        sd[f"{b}.1.DenseReluDense.wi_0.weight"] = w(c["d_ff"], c["d_model"])
        sd[f"{b}.1.DenseReluDense.wi_1.weight"] = w(c["d_ff"], c["d_model"])
        sd[f"{b}.1.DenseReluDense.wo.weight"] = w(c["d_model"], c["d_ff"])
        sd[f"{b}.1.layer_norm.weight"] = w(c["d_model"]) + 1
    sd["spiece_model"] = torch.frombuffer(bytearray((work / "spiece.model").read_bytes()), dtype=torch.uint8)
    save_file(sd, str(path))


def _random_causal_wan(path) -> None:
    from inferix_core.models.wan.checkpoint import save_wan_checkpoint
    from inferix_core.models.wan.config import WanConfig
    from tests.models.wan_state import random_wan_state_dict

    cfg = WanConfig(dim=1536, ffn_dim=8960, num_heads=12, num_layers=30)  # Wan 2.1 T2V 1.3B
    save_wan_checkpoint(random_wan_state_dict(cfg, seed=1), path, layout="comfyui", config=cfg, dtype=torch.bfloat16)


def _random_wan_vae(path) -> None:
    """A Wan 2.1 VAE of the real size with random weights (our key names are the original Wan ones)."""
    from safetensors.torch import save_file

    from inferix_core.vae import WanVAE
    from inferix_core.vae.config import WanVAEConfig

    torch.manual_seed(2)
    vae = WanVAE(WanVAEConfig())
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(path))


def test_our_model_and_a_large_core_model_share_a_gpu_that_fits_one(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.integration.conftest import launch
    from tests.integration.test_core_types import _error, run_prompt

    base = tmp_path_factory.mktemp("gpu_base")
    for sub in ("diffusion_models", "text_encoders", "vae"):
        (base / "models" / sub).mkdir(parents=True)
    _random_wan_vae(base / "models" / "vae" / "inferix_gpu_wan_vae.safetensors")
    _random_causal_wan(base / "models" / "diffusion_models" / "inferix_gpu_causal_wan.safetensors")
    _random_umt5_xxl(base / "models" / "text_encoders" / "inferix_gpu_umt5_xxl.safetensors", base)
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    ballast = torch.empty(int(free - BUDGET_GB * 2**30), dtype=torch.uint8, device="cuda")  # noqa: F841 - held
    with launch(base, cpu=False, extra_args=("--verbose", "DEBUG")) as server:
        graph = {
            "1": {
                "class_type": "CLIPLoader",
                "inputs": {"clip_name": "inferix_gpu_umt5_xxl.safetensors", "type": "wan"},
            },
            "2": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 0], "text": "a car on a coastal road"}},
            "3": {
                "class_type": "InferixLoadWorldModel",
                "inputs": {
                    "model": "inferix_gpu_causal_wan.safetensors",
                    "vae": "inferix_gpu_wan_vae.safetensors",
                    "preview_decoder": "none",
                    "text_encoder": "bundled",
                    "dtype": "bf16",
                    "attention": "sdpa",
                    "device": "auto",
                },
            },
            "4": {
                "class_type": "InferixBlockDenoise",
                "inputs": {
                    "world_model": ["3", 0],
                    "conditioning": ["2", 0],
                    "prompt": "",
                    "num_blocks": 2,
                    "seconds": 0.0,
                    "width": 832,
                    "height": 480,
                    "denoising_steps": "1000,750,500,250",
                    "seed": int(time.time()),
                },
            },
            "5": {"class_type": "SaveLatent", "inputs": {"samples": ["4", 0], "filename_prefix": uuid.uuid4().hex}},
        }
        entry = run_prompt(server, graph, timeout=1200)
        log = server.log_path.read_text(errors="replace")
        assert not _error(entry), _error(entry) + "\n" + server.log_tail(80)
        marks = ("Unloading ", "Unloaded partially", "models unloaded.", "model(s) unloaded")  # ComfyUI's / ours
        unloads = [line for line in log.splitlines() if any(m in line for m in marks)]
        assert unloads, "no eviction in the server log:\n" + server.log_tail(80)
        print(json.dumps({"budget_gb": BUDGET_GB, "evictions": unloads}, indent=2))
