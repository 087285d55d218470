"""Every `workflows/api/*_api.json` is queued on a real ComfyUI and run headless; both give the same outputs.

Issue #6: "`inferix queue` runs every API workflow against a real ComfyUI server; `inferix run` runs the
same files with no server, producing the same outputs for the same seed". Workflows that name real model
files (a Self-Forcing transformer, `wan_2.1_vae.safetensors`, a umT5 encoder) get tiny random stand-ins
under exactly those names, in the server's models/ folders and in a local $INFERIX_MODELS_DIR for
`inferix run`: a 2-layer causal Wan (text_dim = the tiny umT5's d_model, text_len 16, its head count in a
config.json beside the .pt), the tiny Wan VAE fixture and a tiny random umT5 with an embedded tokenizer.
Each run is shrunk with `--set` on the Block Denoise node (64×64, few blocks; scheduled runs keep enough
seconds to reach their last prompt change). Both mp4s must have the same frame count and differ by less
than one grey level on average (the server's torch differs from the client's). Skipped unless
COMFYUI_DIR and COMFYUI_PYTHON are set (see conftest.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_utils import FIXTURES
from tests.integration.test_run_vs_queue import compare, decode

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
# Workflows with core ComfyUI nodes beside ours (Matrix-Game's Load Image + Load CLIP Vision) need a start
# image and a ComfyUI-layout CLIP vision stand-in this test does not build yet; they run headless end to end
# in tests/test_matrix_game2_e2e.py and are validated against the node schemas in tests/nodes/test_workflows.py.
WORKFLOWS = sorted(
    p
    for p in (REPO / "workflows" / "api").glob("*_api.json")
    if all(n["class_type"].startswith("Inferix") for n in json.loads(p.read_text()).values())
)
SEED = 31337  # not the files' own seed, so the server's cache cannot answer from another test's run
SIZE = 64  # px, width and height of every shrunk run
NUM_BLOCKS = 2  # for runs sized by blocks (seconds = 0)
MAX_MEAN_ABS_DIFF = 1.0  # grey levels, 0..255
UMT5_D_MODEL = 32
TEXT_LEN = 16
# the model-file inputs of Inferix Load World Model and the models/ folder each is looked up in
MODEL_FOLDERS = {
    "model": "diffusion_models",
    "vae": "vae",
    "text_encoder": "text_encoders",
    "preview_decoder": "vae_approx",
}
NO_FILE = {"bundled", "none"}


def _tiny_umt5(path: Path, work: Path, d_model: int = UMT5_D_MODEL) -> None:
    """A tiny random umT5 encoder in ComfyUI's layout with a tiny SentencePiece model as `spiece_model`."""
    import torch
    from safetensors.torch import save_file

    transformers = pytest.importorskip("transformers")
    spm = pytest.importorskip("sentencepiece")
    words = ["car", "road", "coastal", "sunset", "snow", "night", "mountain", "drives", "along", "the", "a", "light"]
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(words[i] for i in torch.randint(len(words), (8,), generator=g).tolist()) for _ in range(300)]
    (work / "corpus.txt").write_text("\n".join(lines))
    spm.SentencePieceTrainer.train(
        input=str(work / "corpus.txt"),
        model_prefix=str(work / "spiece"),
        vocab_size=30,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        model_type="unigram",
        minloglevel=2,
    )
    torch.manual_seed(0)
    config = transformers.UMT5Config(
        vocab_size=64,
        d_model=d_model,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        use_cache=False,
    )
    model = transformers.UMT5EncoderModel(config).eval()
    sd = {
        k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"
    }
    sd["spiece_model"] = torch.frombuffer(bytearray((work / "spiece.model").read_bytes()), dtype=torch.uint8)
    save_file(sd, str(path))


def _tiny_transformer(path: Path) -> None:
    """A tiny random causal Wan saved in the layout its file name implies (.pt: Self-Forcing, else ComfyUI).

    A .pt file has no metadata, so the head count and text length go into a config.json beside it (which
    the loader trusts when its `dim` matches the weights).
    """
    from inferix_core.models.wan.checkpoint import save_wan_checkpoint
    from inferix_core.models.wan.config import WanConfig
    from tests.models.wan_state import random_wan_state_dict

    cfg = WanConfig(
        dim=32, ffn_dim=64, freq_dim=16, text_dim=UMT5_D_MODEL, text_len=TEXT_LEN, num_heads=2, num_layers=2
    )
    sd = random_wan_state_dict(cfg, seed=7)
    if path.suffix == ".safetensors":
        save_wan_checkpoint(sd, path, layout="comfyui", config=cfg)
    else:
        save_wan_checkpoint(sd, path, layout="self_forcing", config=cfg)
        (path.parent / "config.json").write_text(
            json.dumps({"dim": cfg.dim, "num_heads": cfg.num_heads, "text_len": cfg.text_len})
        )


def _tiny_lora(path: Path) -> None:
    """A small random LoRA for `_tiny_transformer`'s block linears, in LongLive's peft `lora.pt` layout."""
    import torch

    g = torch.Generator().manual_seed(8)
    sizes = {"self_attn.q": (32, 32), "cross_attn.o": (32, 32), "ffn.0": (64, 32), "ffn.2": (32, 64)}
    sd = {}
    for block in range(2):
        for module, (out_f, in_f) in sizes.items():
            key = f"base_model.model.blocks.{block}.{module}"
            sd[f"{key}.lora_A.weight"] = torch.randn(2, in_f, generator=g) * 0.05
            sd[f"{key}.lora_B.weight"] = torch.randn(out_f, 2, generator=g) * 0.05
    torch.save({"generator_lora": sd, "critic_lora": {}, "step": 0}, path)


def _referenced_files(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    """(models/ folder, file name) of every model file the workflow's loader nodes name."""
    found = []
    for node in workflow.values():
        if node["class_type"] == "InferixLoadWorldModelLoRA":
            found.append(("loras", node["inputs"]["lora_name"]))
        if node["class_type"] != "InferixLoadWorldModel":
            continue
        for name, folder in MODEL_FOLDERS.items():
            value = node["inputs"].get(name)
            if isinstance(value, str) and value not in NO_FILE:
                found.append((folder, value))
    return found


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Tiny stand-in files for every model file any workflow names, built once."""
    work = tmp_path_factory.mktemp("stand_ins")
    made: dict[tuple[str, str], Path] = {}
    for wf_path in WORKFLOWS:
        for folder, name in _referenced_files(json.loads(wf_path.read_text())):
            if (folder, name) in made:
                continue
            target = work / folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if folder == "diffusion_models":
                _tiny_transformer(target)
            elif folder == "vae":
                shutil.copyfile(FIXTURES / "wan_vae_tiny.safetensors", target)
            elif folder == "text_encoders":
                _tiny_umt5(target, tmp_path_factory.mktemp("spm"))
            elif folder == "loras":
                _tiny_lora(target)
            else:
                pytest.fail(f"no stand-in for {folder}/{name}")
            made[(folder, name)] = target
    return made


@pytest.fixture(scope="module")
def models_dirs(comfyui, stand_ins, tmp_path_factory) -> Path:
    """Copy the stand-ins into the server's models/ and into a local models dir; return the local one."""
    local = tmp_path_factory.mktemp("local_models")
    for root in (comfyui.base_dir / "models", local):
        for (folder, _name), src in stand_ins.items():
            dest = root / folder
            dest.mkdir(parents=True, exist_ok=True)
            for f in src.parent.iterdir():  # the file and any config.json beside it
                if not (dest / f.name).exists():
                    shutil.copyfile(f, dest / f.name)
    return local


def _max_schedule_time(workflow: dict[str, Any]) -> float:
    """Latest time (s) in any Prompt Schedule of the workflow (0 when there is none)."""
    times = [0.0]
    for node in workflow.values():
        if node["class_type"] == "InferixPromptSchedule":
            times += [float(m) for m in re.findall(r"^\s*([0-9.]+)\s*\|", node["inputs"]["schedule"], re.M)]
    return max(times)


def _overrides(workflow: dict[str, Any], prefix: str) -> list[str]:
    """`--set` arguments: our seed and size, few blocks or just enough seconds, our filename prefix."""
    sets: dict[str, Any] = {}
    for nid, node in workflow.items():
        kind, inputs = node["class_type"], node["inputs"]
        if kind == "InferixBlockDenoise":
            sets |= {f"{nid}.seed": SEED, f"{nid}.width": SIZE, f"{nid}.height": SIZE, f"{nid}.num_blocks": NUM_BLOCKS}
            if float(inputs.get("seconds", 0)) > 0:  # seconds win over blocks; keep the schedule's last change
                sets[f"{nid}.seconds"] = _max_schedule_time(workflow) + 1.0
        elif kind == "InferixBranchWorld":  # its own size and blocks (832x480, 4 + 3 blocks for each future)
            sets |= {f"{nid}.seed": SEED, f"{nid}.width": SIZE, f"{nid}.height": SIZE}
            sets |= {f"{nid}.past_blocks": 1, f"{nid}.future_blocks": 1}
        elif kind == "InferixLVBenchPrompts":
            sets |= {f"{nid}.until_seconds": 5.0}  # two 2.5 s caption segments
        elif "filename_prefix" in inputs:
            # two outputs of one class (Branch World's futures and kept video) keep apart: which of them
            # ComfyUI runs first is its own choice, so one shared prefix would number them either way
            twins = sum(n["class_type"] == kind and "filename_prefix" in n["inputs"] for n in workflow.values())
            sets[f"{nid}.filename_prefix"] = prefix if twins == 1 else f"{prefix}_{nid}"
    if any(n["class_type"] == "InferixLVBenchPrompts" for n in workflow.values()):  # the video reaches until_seconds
        for did, dnode in workflow.items():
            if dnode["class_type"] == "InferixBlockDenoise" and float(dnode["inputs"].get("seconds", 0)) > 0:
                sets[f"{did}.seconds"] = 5.0
    args = ["--no-progress"]
    for key, value in sets.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def _reported(stdout: str) -> dict[str, Path]:
    """The output files a `run` / `queue` printed under "outputs:", by name.

    `inferix run` also lists the per-block preview JPEGs it wrote to its temp folder (ComfyUI's type
    'temp', which `inferix queue` does not download); those are previews, not outputs, and are left out.
    """
    lines = stdout.split("outputs:\n", 1)[1].splitlines() if "outputs:\n" in stdout else []
    paths = [Path(line.strip()) for line in lines if line.startswith("  ")]
    paths = [p for p in paths if not {"inferix_temp", "temp"} & set(p.parts)]
    # `run` also lists the per-frame PNGs (save_frames); ComfyUI's history does not: compared by _saved_frames
    paths = [p for p in paths if not (p.name.startswith("frame_") and p.suffix == ".png")]
    return {p.name: p for p in paths}


def _saved_frames(folder: Path) -> list[str]:
    """Names of the per-frame PNGs (Stream Settings save_frames) under folder."""
    return sorted(p.name for p in folder.rglob("frame_*.png"))


@pytest.mark.parametrize("wf_path", WORKFLOWS, ids=[p.name.removesuffix("_api.json") for p in WORKFLOWS])
def test_workflow_queued_and_run_give_the_same_outputs(comfyui, models_dirs, wf_path, tmp_path):
    workflow = json.loads(wf_path.read_text())
    name = wf_path.name.removesuffix("_api.json")
    overrides = _overrides(workflow, f"inferix/all_{name}")
    queued_dir, local_dir = tmp_path / "queued", tmp_path / "local"

    queued = comfyui.inferix(
        "queue",
        str(wf_path),
        "--server",
        comfyui.url,
        "--output-dir",
        str(queued_dir),
        "--timeout",
        "300",
        *overrides,
        timeout=330,
    )
    assert queued.returncode == 0, f"{name}: queue failed\n{queued.stdout}\n{queued.stderr}\n{comfyui.log_tail()}"
    env = {**os.environ, "INFERIX_MODELS_DIR": str(models_dirs)}
    local = subprocess.run(
        [sys.executable, "-m", "inferix_core", "run", str(wf_path), "--output-dir", str(local_dir), *overrides],
        capture_output=True,
        text=True,
        timeout=330,
        cwd=REPO,
        env=env,
    )
    assert local.returncode == 0, f"{name}: run failed\n{local.stdout}\n{local.stderr}"

    queued_files, local_files = _reported(queued.stdout), _reported(local.stdout)
    assert sorted(queued_files) == sorted(local_files), (queued.stdout, local.stdout)
    assert all(p.is_file() for p in [*queued_files.values(), *local_files.values()])
    # PNG frames stay in the server's output folder (not downloaded); the same ones must exist locally
    server_frames = _saved_frames(comfyui.output_dir / "inferix" / f"all_{name}_00001")
    assert server_frames == _saved_frames(local_dir / "inferix" / f"all_{name}_00001")
    if any(n["inputs"].get("save_frames") == "png" for n in workflow.values()):
        assert server_frames, f"{name}: save_frames=png but no PNG frames were written"
    mp4s = sorted(n for n in local_files if n.endswith(".mp4"))
    assert mp4s, f"{name}: no mp4 among {sorted(local_files)}"
    for mp4 in mp4s:
        q, loc = decode(queued_files[mp4]), decode(local_files[mp4])
        assert q.shape == loc.shape, (mp4, q.shape, loc.shape)
        mean_abs, psnr, max_abs = compare(loc, q)
        summary = (
            f"{name}: {mp4} {len(loc)} frames {loc.shape[2]}x{loc.shape[1]}, mean |diff| {mean_abs:.4f}, "
            f"max |diff| {max_abs}, PSNR {psnr:.2f} dB"
        )
        log.warning("%s", summary)
        assert mean_abs < MAX_MEAN_ABS_DIFF, summary

    # text outputs (profile report, LV-Bench scores) come back in the server's history
    prompt_id = queued.stdout.split("queued prompt ")[1].split()[0]
    outputs = comfyui.get_json(f"/history/{prompt_id}")[prompt_id]["outputs"]
    for nid, node in workflow.items():
        if node["class_type"] in ("InferixLVBenchScore", "InferixProfileReport"):
            texts = outputs.get(nid, {}).get("text")
            assert texts and texts[0].strip(), f"{name}: node {nid} ({node['class_type']}) shows no text: {outputs}"
    for nid, node in workflow.items():
        if node["class_type"] == "InferixLVBenchScore":
            history = comfyui.get_json(f"/history/{prompt_id}")[prompt_id]
            log.warning("%s LV-Bench table:\n%s", name, outputs[nid]["text"][0])
            assert history["status"]["status_str"] == "success"
