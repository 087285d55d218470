"""Write the example workflows: each graph once, saved in UI format (opens in ComfyUI) and API format.

Run `python workflows/build.py` after changing a node's inputs; tests/nodes/test_workflows.py checks
that every UI file converts to its `_api.json` twin and that both validate against the node classes.
Socket and widget order come from the node classes themselves, so the files cannot drift from them.

Where they go: ComfyUI shows every `*.json` directly inside a pack's `example_workflows/` (and also
`example/`, `examples/`, `workflow/`, `workflows/`: app/custom_node_manager.py in v0.3.64 and v0.27) as a
template card titled with the file name, its thumbnail the `.jpg` of the same name. So the UI files go to
`example_workflows/<card title>.json` (thumbnails by `workflows/thumbnails.py`), and the API twins, which
would open as empty graphs there, to `workflows/api/<name>_api.json`, a subfolder nothing scans.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from inferix_core.workflow.schema import NodeSchema
from inferix_core.workflow.ui_format import lay_out

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
UI_DIR = HERE.parent / "example_workflows"  # template cards: UI format only
API_DIR = HERE / "api"  # API twins (inferix run / inferix queue / Export (API)): not scanned by ComfyUI
# characters kept in a card's file name (its title in the Templates dialog); others become spaces
_CARD_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,()+-")

HF = "https://huggingface.co"
SELF_FORCING = {
    "name": "self_forcing_dmd.pt",
    "directory": "diffusion_models",
    "url": f"{HF}/gdhe17/Self-Forcing/resolve/main/checkpoints/self_forcing_dmd.pt",
}
WAN_VAE = {
    "name": "wan_2.1_vae.safetensors",
    "directory": "vae",
    "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/vae/wan_2.1_vae.safetensors",
}
# LongLive 2.0-5B ships one merged bf16 generator (base + LoRA); Wan 2.2 (48-channel) weights without a family
# in their file name load as longlive2
LONGLIVE2 = {
    "name": "model_bf16.pt",
    "directory": "diffusion_models",
    "url": f"{HF}/Efficient-Large-Model/LongLive-2.0-5B/resolve/main/model_bf16.pt",
}
WAN22_VAE = {
    "name": "wan2.2_vae.safetensors",
    "directory": "vae",
    "url": f"{HF}/Comfy-Org/Wan_2.2_ComfyUI_Repackaged/resolve/main/split_files/vae/wan2.2_vae.safetensors",
}
UMT5 = {
    "name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
    "directory": "text_encoders",
    "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/text_encoders/"
    "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
}

# LongLive 1.3B as its authors ship it (NVlabs/LongLive v1.0 README: `huggingface-cli download
# Efficient-Large-Model/LongLive-1.3B --local-dir longlive_models`; configs/longlive_inference.yaml)
LONGLIVE_BASE = {
    "name": "longlive_base.pt",
    "directory": "diffusion_models",
    "url": f"{HF}/Efficient-Large-Model/LongLive-1.3B/resolve/main/models/longlive_base.pt",
}
LONGLIVE_LORA = {
    "name": "lora.pt",
    "directory": "loras",
    "url": f"{HF}/Efficient-Large-Model/LongLive-1.3B/resolve/main/models/lora.pt",
}
CAUSAL_FORCING_FRAMEWISE = {
    "name": "causal_forcing.pt",  # framewise/ and chunkwise/ share this name: the loader's family input says which
    "directory": "diffusion_models",
    "url": f"{HF}/zhuhz22/Causal-Forcing/resolve/main/framewise/causal_forcing.pt",
}
# Matrix-Game 2.0 (Skywork/Matrix-Game-2.0 on Hugging Face): the released files under their own names
MG2 = f"{HF}/Skywork/Matrix-Game-2.0/resolve/main"
MG2_UNIVERSAL = {
    "name": "base_distilled_model/base_distill.safetensors",
    "directory": "diffusion_models",
    "url": f"{MG2}/base_distilled_model/base_distill.safetensors",
}
MG2_GTA = {
    "name": "gta_distilled_model/gta_keyboard2dim.safetensors",
    "directory": "diffusion_models",
    "url": f"{MG2}/gta_distilled_model/gta_keyboard2dim.safetensors",
}
MG2_VAE = {"name": "Wan2.1_VAE.pth", "directory": "vae", "url": f"{MG2}/Wan2.1_VAE.pth"}
CLIP_VISION_H = {
    "name": "clip_vision_h.safetensors",
    "directory": "clip_vision",
    "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/clip_vision/clip_vision_h.safetensors",
}

# fp8 and compile are opt-in speed options (fp8 trades a little quality, compile a cold start): off in the examples
BUNDLED_LOADER = {
    "model": "bundled",
    "vae": "bundled",
    "preview_decoder": "none",
    "text_encoder": "bundled",
    "dtype": "auto",
    "attention": "sdpa",
    "device": "auto",
    "fp8": False,
    "compile": False,
    "family": "auto",  # read from the file (the node's text says why)
    "weights": "auto",  # training checkpoints: what the family's authors load (generator_ema or generator)
    "cuda_graphs": False,  # opt-in until measured (docs/performance.md)
}
SF_LOADER = {**BUNDLED_LOADER, "model": SELF_FORCING["name"], "vae": WAN_VAE["name"], "text_encoder": UMT5["name"]}
LL2_LOADER = {**BUNDLED_LOADER, "model": LONGLIVE2["name"], "vae": WAN22_VAE["name"], "text_encoder": UMT5["name"]}
DENOISE = {
    "prompt": "a car drives along a winding coastal road at sunset",
    "num_blocks": 7,
    "seconds": 0.0,
    "width": 832,
    "height": 480,
    "denoising_steps": "1000,750,500,250",
    "seed": 42,
}
# the bundled model is steered by actions; its prompt (v2: a scene word of its vocabulary) stays empty, which
# means the default scene; its size is the one it was trained at (the shipped config.json)
_BUNDLED_CONFIG = json.loads(
    (Path(__file__).resolve().parents[1] / "inferix_core/assets/bundled/config.json").read_text()
)
# the bundled model's prompt picks its scene (day / sunset / night) when its files have a vocabulary (v2)
_BUNDLED_PROMPT = "a drive at sunset" if "prompt" in _BUNDLED_CONFIG else ""
BUNDLED_DENOISE = {**DENOISE, "prompt": _BUNDLED_PROMPT, "width": _BUNDLED_CONFIG["width"],
                   "height": _BUNDLED_CONFIG["height"]}  # fmt: skip
STREAM_OUT = {"fps": 16.0, "filename_prefix": "inferix/video", "save_frames": "none", "crf": 18}
# Block Denoise writes the mp4 while it generates (Stream Settings → its `stream` input); Stream Out shows it
STREAM = {"filename_prefix": "inferix/video", "fps": 0.0, "crf": 18, "save_frames": "none"}
KV_WINDOW = {
    "window_frames": 12,
    "sink_frames": 3,
    "page_frames": 0,
    "offload": "off",
    "gpu_budget_gb": 0.0,
    "quantization": "none",
}
LONG_PROMPTS = (
    "0 | a car drives along a coastal road at sunset, cinematic\n"
    "10 | the road climbs into snowy mountains at dusk\n"
    "20 | night falls, headlights light up the falling snow"
)
# an LV-Bench caption file (bundled example; point it at the benchmark's captions) → the prompt schedule
LVBENCH_PROMPTS = {
    "captions_path": "workflows/captions/lvbench_example.json",
    "video_id": "",
    "segment_seconds": 2.5,
    "until_seconds": 30.0,
}
DRIVE_ACTIONS = "0 | accelerate\n2 | steer_left\n3.5 | accelerate\n5.5 | steer_right\n7 | accelerate\n9 | brake"
# Matrix-Game 2.0: keys and per-frame camera turns (the authors' demos turn by 0.1 per frame), 640x352,
# 3 steps per 3-frame block; the start image (ComfyUI's input/example.png) and its CLIP ViT-H tokens condition it
MG2_DENOISE = {**DENOISE, "prompt": "", "seconds": 12.0, "width": 640, "height": 352, "denoising_steps": "1000,666,333"}
MG2_LOADER = {**BUNDLED_LOADER, "vae": MG2_VAE["name"], "text_encoder": "bundled"}
MG2_UNIVERSAL_ACTIONS = "0 | W\n2 | W yaw=0.1\n4 | W+A\n6 | none pitch=0.05\n8 | S yaw=-0.1\n10 | D"
MG2_GTA_ACTIONS = "0 | W\n3 | W D\n5 | W\n7 | W A\n9 | S"


Node = tuple[int, str, dict[str, Any], dict[str, tuple[int, int]]]


def load_world_model(nid: int, widgets: dict[str, Any]) -> Node:
    return (nid, "InferixLoadWorldModel", widgets, {})


def stream_settings(nid: int, prefix: str, **widgets: Any) -> Node:
    """Stream Settings writing `prefix`_NNNNN.mp4 while Block Denoise generates (other STREAM widgets in `widgets`)."""
    return (nid, "InferixStreamSettings", {**STREAM, "filename_prefix": prefix, **widgets}, {})


def block_denoise(nid: int, widgets: dict[str, Any], **inputs: int) -> Node:
    """Block Denoise with each linked input (world_model=1, stream=5, ...) taken from output 0 of that node."""
    return (nid, "InferixBlockDenoise", widgets, {name: (src, 0) for name, src in inputs.items()})


def stream_out(nid: int, prefix: str, video: int, **widgets: Any) -> Node:
    """Stream Out of Block Denoise node `video`'s VIDEO (its output 2)."""
    return (nid, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": prefix, **widgets}, {"video": (video, 2)})


def kv_cache(nid: int, widgets: dict[str, Any], world_model: int) -> Node:
    return (nid, "InferixKVCacheConfig", widgets, {"world_model": (world_model, 0)})


class CoreLoadImage:
    """Interface of ComfyUI's core Load Image, for building and validating workflow files (it does not run here)."""

    RETURN_TYPES = ("IMAGE", "MASK")
    RETURN_NAMES = ("IMAGE", "MASK")
    FUNCTION = "load_image"

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802 - ComfyUI's V1 name
        return {"required": {"image": ("STRING", {"default": "example.png"})}}


class CoreCLIPVisionLoader:
    """Interface of ComfyUI's core Load CLIP Vision (models/clip_vision), for building and validating files."""

    RETURN_TYPES = ("CLIP_VISION",)
    RETURN_NAMES = ("CLIP_VISION",)
    FUNCTION = "load_clip"

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802 - ComfyUI's V1 name
        return {"required": {"clip_name": ("STRING", {"default": CLIP_VISION_H["name"]})}}


class CoreImageScale:
    """Interface of ComfyUI's core Upscale Image (nodes.py ImageScale), for building and validating files."""

    RETURN_TYPES = ("IMAGE",)
    RETURN_NAMES = ("IMAGE",)
    FUNCTION = "upscale"

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802 - ComfyUI's V1 name
        return {
            "required": {
                "image": ("IMAGE",),
                "upscale_method": (["nearest-exact", "bilinear", "area", "bicubic", "lanczos"],),
                "width": ("INT", {"default": 512, "min": 0, "max": 16384, "step": 1}),
                "height": ("INT", {"default": 512, "min": 0, "max": 16384, "step": 1}),
                "crop": (["disabled", "center"],),
            }
        }


# core ComfyUI nodes the Matrix-Game and LongLive 2.0 I2V workflows use: they open in ComfyUI, not in `inferix run`
CORE_NODE_CLASSES = {"LoadImage": CoreLoadImage, "CLIPVisionLoader": CoreCLIPVisionLoader, "ImageScale": CoreImageScale}

# The Templates dialog shows a pack's card by its file name and cuts long ones: each card gets a short title
# (its file name, "Inferix <short title>") and keeps the whole sentence below as its description.
SHORT_TITLES = {
    "quickstart": "Quickstart (bundled model, CPU)",
    "continue_world": "Continue a world",
    "branch_world": "Branch World",
    "self_forcing_t2v": "Self-Forcing text-to-video",
    "longlive2_t2v": "LongLive 2.0 text-to-video",
    "longlive2_i2v": "LongLive 2.0 image-to-video",
    "long_video": "Long video",
    "interactive": "Interactive driving world",
    "low_vram": "Low VRAM",
    "longlive_lora": "LongLive 1.3B with LoRA",
    "causal_forcing_t2v": "Causal-Forcing text-to-video",
    "lvbench_score": "LV-Bench score",
    "matrix_game2_universal": "Matrix-Game 2.0 universal",
    "matrix_game2_gta_drive": "Matrix-Game 2.0 GTA drive",
}
MAX_TITLE = 40  # characters of "Inferix <short title>" the dialog shows whole

# name -> (description, nodes, models); a node is (id, class_type, widget values, {input: (source id, output index)})
GRAPHS: dict[str, tuple[str, list[Node], list[dict]]] = {
    "quickstart": (
        "Quickstart: the bundled world model on CPU",
        [
            load_world_model(1, BUNDLED_LOADER),
            (2, "InferixActionSchedule", {"schedule": DRIVE_ACTIONS}, {}),
            stream_settings(5, "inferix/quickstart"),
            block_denoise(3, {**BUNDLED_DENOISE, "num_blocks": 14}, world_model=1, action_schedule=2, stream=5),
            stream_out(4, "inferix/quickstart", 3),
        ],
        [],
    ),
    "continue_world": (
        "Continue a world: save it after 7 blocks and go on from there (bundled model on CPU)",
        [
            (1, "InferixLoadWorldModel", BUNDLED_LOADER, {}),
            (2, "InferixActionSchedule", {"schedule": DRIVE_ACTIONS}, {}),
            (
                3,
                "InferixBlockDenoise",
                {**BUNDLED_DENOISE, "num_blocks": 7},
                {"world_model": (1, 0), "action_schedule": (2, 0)},
            ),
            (4, "InferixSaveWorldState", {"filename_prefix": "inferix/world"}, {"world_state": (3, 4)}),
            (5, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/continued"}, {}),
            (
                6,
                "InferixBlockDenoise",
                {**BUNDLED_DENOISE, "num_blocks": 7},
                {"world_model": (1, 0), "action_schedule": (2, 0), "stream": (5, 0), "world_state": (3, 4)},
            ),
            (7, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/continued"}, {"video": (6, 2)}),
        ],
        [],
    ),
    "branch_world": (
        "Branch World: one coastal road, three futures from the same moment side by side (Self-Forcing 1.3B)",
        [
            load_world_model(1, SF_LOADER),
            (
                2,
                "InferixBranchWorld",
                {
                    "past_prompt": "a car drives along a winding coastal road at sunset",
                    "futures": "=\na car drives along a winding coastal road at night\n"
                    "a car drives along a winding coastal road in snow",
                    "past_blocks": 4,
                    "future_blocks": 3,
                    "width": 832,
                    "height": 480,
                    "seed": 42,
                    "keep": 1,
                },
                {"world_model": (1, 0)},
            ),
            (3, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/branches"}, {"images": (2, 0)}),
            (4, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/branch_kept"}, {"images": (2, 1)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "self_forcing_t2v": (
        "Self-Forcing text-to-video (Wan 2.1 1.3B, 4 steps per block)",
        [
            load_world_model(1, SF_LOADER),
            stream_settings(5, "inferix/self_forcing"),
            block_denoise(2, DENOISE, world_model=1, stream=5),
            stream_out(3, "inferix/self_forcing", 2),
            (4, "InferixProfileReport", {}, {"video": (2, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "longlive2_t2v": (
        "LongLive 2.0 text-to-video (Wan 2.2 TI2V-5B, 704x1280, UniPC 4 steps per 8-frame block, 24 fps). "
        "Image start: connect an image (core Load Image) to Block Denoise's start_frames",
        [
            load_world_model(1, LL2_LOADER),
            stream_settings(5, "inferix/longlive2"),
            block_denoise(
                2,
                {
                    **DENOISE,
                    "prompt": "a red fox runs through fresh snow in a pine forest, cinematic",
                    "num_blocks": 6,
                    "width": 1280,
                    "height": 704,
                    "denoising_steps": "",  # the family's UniPC timesteps
                },
                world_model=1,
                stream=5,
            ),
            stream_out(3, "inferix/longlive2", 2, fps=24.0),
            (4, "InferixProfileReport", {}, {"video": (2, 2)}),
        ],
        [LONGLIVE2, WAN22_VAE, UMT5],
    ),
    "longlive2_i2v": (
        "LongLive 2.0 image-to-video (Wan 2.2 TI2V-5B, 704x1280, 24 fps): the image, resized to 1280x704 without a "
        "crop as the authors do, is the clean first latent (ComfyUI)",
        [
            (1, "InferixLoadWorldModel", LL2_LOADER, {}),
            (2, "LoadImage", {"image": "example.png"}, {}),
            (
                3,
                "ImageScale",
                {"upscale_method": "lanczos", "width": 1280, "height": 704, "crop": "disabled"},
                {"image": (2, 0)},
            ),
            (4, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/longlive2_i2v"}, {}),
            (
                5,
                "InferixBlockDenoise",
                {
                    **DENOISE,
                    "prompt": "the camera slowly pushes in as the scene comes to life, cinematic",
                    "num_blocks": 6,
                    "width": 1280,
                    "height": 704,
                    "denoising_steps": "",  # the family's UniPC timesteps
                },
                {"world_model": (1, 0), "stream": (4, 0), "start_frames": (3, 0)},
            ),
            (
                6,
                "InferixStreamOut",
                {**STREAM_OUT, "fps": 24.0, "filename_prefix": "inferix/longlive2_i2v"},
                {"video": (5, 2)},
            ),
        ],
        [LONGLIVE2, WAN22_VAE, UMT5],
    ),
    "long_video": (
        "Long video: rolling window with attention sink and a prompt schedule",
        [
            load_world_model(1, SF_LOADER),
            kv_cache(2, KV_WINDOW, 1),
            (3, "InferixPromptSchedule", {"schedule": LONG_PROMPTS}, {}),
            stream_settings(6, "inferix/long"),
            block_denoise(4, {**DENOISE, "seconds": 30.0}, world_model=1, kv_cache=2, prompt_schedule=3, stream=6),
            stream_out(5, "inferix/long", 4),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "interactive": (
        "Interactive: an action-driven world (bundled driving model)",
        [
            load_world_model(1, BUNDLED_LOADER),
            (2, "InferixActionSchedule", {"schedule": DRIVE_ACTIONS}, {}),
            kv_cache(3, KV_WINDOW, 1),
            stream_settings(6, "inferix/drive", save_frames="png"),
            block_denoise(
                4,
                {**BUNDLED_DENOISE, "seconds": 8.0},
                world_model=1,
                kv_cache=3,
                action_schedule=2,
                stream=6,
            ),
            stream_out(5, "inferix/drive", 4),
        ],
        [],
    ),
    "low_vram": (
        "Low VRAM: bf16, KV cache offload and int8 quantization under a 2 GiB budget",
        [
            load_world_model(1, {**SF_LOADER, "dtype": "bf16"}),
            kv_cache(
                2,
                {
                    "window_frames": 21,
                    "sink_frames": 3,
                    "page_frames": 3,
                    "offload": "auto",
                    "gpu_budget_gb": 2.0,
                    "quantization": "int8",
                },
                world_model=1,
            ),
            stream_settings(6, "inferix/low_vram"),
            block_denoise(3, {**DENOISE, "num_blocks": 20}, world_model=1, kv_cache=2, stream=6),
            stream_out(4, "inferix/low_vram", 3),
            (5, "InferixProfileReport", {}, {"video": (3, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "longlive_lora": (
        "LongLive 1.3B: base weights + the authors' LoRA, 12-frame window with a 3-frame sink, prompt switches",
        [
            load_world_model(1, {**SF_LOADER, "model": LONGLIVE_BASE["name"]}),
            (
                2,
                "InferixLoadWorldModelLoRA",
                {"lora_name": LONGLIVE_LORA["name"], "strength": 1.0},
                {"world_model": (1, 0)},
            ),
            kv_cache(3, KV_WINDOW, 2),
            (4, "InferixPromptSchedule", {"schedule": LONG_PROMPTS}, {}),
            stream_settings(7, "inferix/longlive"),
            block_denoise(5, {**DENOISE, "seconds": 30.0}, world_model=2, kv_cache=3, prompt_schedule=4, stream=7),
            stream_out(6, "inferix/longlive", 5),
        ],
        [LONGLIVE_BASE, LONGLIVE_LORA, WAN_VAE, UMT5],
    ),
    "causal_forcing_t2v": (
        "Causal-Forcing frame-wise text-to-video (Wan 2.1 1.3B, 1 latent frame per block, 4 steps, EMA weights)",
        [
            load_world_model(
                1, {**SF_LOADER, "model": CAUSAL_FORCING_FRAMEWISE["name"], "family": "causal_forcing_framewise"}
            ),
            stream_settings(5, "inferix/causal_forcing"),
            # 21 one-frame blocks = 81 frames; steps: the family's
            block_denoise(2, {**DENOISE, "num_blocks": 21, "denoising_steps": ""}, world_model=1, stream=5),
            stream_out(3, "inferix/causal_forcing", 2),
        ],
        [CAUSAL_FORCING_FRAMEWISE, WAN_VAE, UMT5],
    ),
    "lvbench_score": (
        "LV-Bench: generate a long video from an LV-Bench prompt set and score its quality drift",
        [
            load_world_model(1, SF_LOADER),
            kv_cache(2, KV_WINDOW, 1),
            (3, "InferixLVBenchPrompts", LVBENCH_PROMPTS, {}),
            stream_settings(7, "inferix/lvbench"),
            block_denoise(4, {**DENOISE, "seconds": 30.0}, world_model=1, kv_cache=2, prompt_schedule=3, stream=7),
            stream_out(5, "inferix/lvbench", 4),
            (6, "InferixLVBenchScore", {"metrics": "published (5 VDE metrics)", "chunks": 10}, {"video": (4, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "matrix_game2_universal": (
        "Matrix-Game 2.0 universal: an image-started world steered by W/A/S/D and the camera (ComfyUI)",
        [
            load_world_model(1, {**MG2_LOADER, "model": MG2_UNIVERSAL["name"]}),
            (2, "LoadImage", {"image": "example.png"}, {}),
            (3, "CLIPVisionLoader", {"clip_name": CLIP_VISION_H["name"]}, {}),
            (4, "InferixActionSchedule", {"schedule": MG2_UNIVERSAL_ACTIONS}, {}),
            stream_settings(5, "inferix/matrix_game2"),
            block_denoise(6, MG2_DENOISE, world_model=1, action_schedule=4, stream=5, start_image=2, clip_vision=3),
            stream_out(7, "inferix/matrix_game2", 6),
        ],
        [MG2_UNIVERSAL, MG2_VAE, CLIP_VISION_H],
    ),
    "matrix_game2_gta_drive": (
        "Matrix-Game 2.0 GTA drive: W/S drive, A/D steer, from a start image (ComfyUI)",
        [
            load_world_model(1, {**MG2_LOADER, "model": MG2_GTA["name"]}),
            (2, "LoadImage", {"image": "example.png"}, {}),
            (3, "CLIPVisionLoader", {"clip_name": CLIP_VISION_H["name"]}, {}),
            (4, "InferixActionSchedule", {"schedule": MG2_GTA_ACTIONS}, {}),
            stream_settings(5, "inferix/matrix_game2_gta"),
            block_denoise(6, MG2_DENOISE, world_model=1, action_schedule=4, stream=5, start_image=2, clip_vision=3),
            stream_out(7, "inferix/matrix_game2_gta", 6),
        ],
        [MG2_GTA, MG2_VAE, CLIP_VISION_H],
    ),
}


def card_name(title: str) -> str:
    """A template card's file stem: 'Inferix ' + the title, ':' as ' -', nothing a file system or URL minds."""
    text = "".join(c if c in _CARD_CHARS else " " for c in title.replace(":", " -"))
    return "Inferix " + " ".join(text.split())


def ui_path(name: str, title: str, ui_dir: Path | None = None) -> Path:
    """The card's file: named after the short title (`title` is the description, kept for callers)."""
    return (ui_dir or UI_DIR) / f"{card_name(SHORT_TITLES[name])}.json"


def api_path(name: str, api_dir: Path | None = None) -> Path:
    return (api_dir or API_DIR) / f"{name}_api.json"


def build_api(nodes: list, schemas: dict[str, NodeSchema]) -> dict[str, Any]:
    """API format: {id: {class_type, inputs, _meta}} with links as [source id, output index]."""
    api: dict[str, Any] = {}
    for nid, class_type, widgets, links in nodes:
        inputs: dict[str, Any] = {}
        for spec in schemas[class_type].inputs:  # declaration order
            if spec.name in widgets:
                inputs[spec.name] = widgets[spec.name]
            elif spec.name in links:
                inputs[spec.name] = [str(links[spec.name][0]), links[spec.name][1]]
        api[str(nid)] = {"class_type": class_type, "inputs": inputs, "_meta": {"title": class_type}}
    return api


# What ComfyUI's front end adds under a node's widgets once it runs, in px: previews and text panels
EXTRA_HEIGHT = {"InferixBlockDenoise": 240, "LoadImage": 320}
OUTPUT_NODE_EXTRA = 320  # an output node shows its video, image or text


def node_size(schema: NodeSchema, class_type: str) -> list[int]:
    """A node's size as ComfyUI draws it at the default zoom (slots, widgets, multiline boxes, previews),
    generous, so that laid out at this size no node grows over its neighbour."""
    slots = max(sum(1 for s in schema.inputs if s.category != "hidden" and not s.is_widget), len(schema.return_types))
    widgets = schema.widget_inputs
    multiline = sum(1 for s in widgets if s.options.get("multiline"))
    extra = EXTRA_HEIGHT.get(class_type, OUTPUT_NODE_EXTRA if schema.output_node else 0)
    return [400, 20 + 22 * slots + 28 * len(widgets) + 90 * multiline + extra]


def build_ui(
    name: str, title: str, nodes: list, models: list[dict], schemas: dict[str, NodeSchema], classes: dict[str, Any]
) -> dict[str, Any]:
    """UI format (LiteGraph): nodes with sockets and widgets_values, a links table, model download hints."""
    link_rows, ui_nodes, link_id = [], [], 0
    outgoing: dict[tuple[int, int], list[int]] = {}
    class_of = {nid: class_type for nid, class_type, _, _ in nodes}
    for order, (nid, class_type, widgets, links) in enumerate(nodes):
        schema, inputs = schemas[class_type], []
        for spec in schema.inputs:
            if spec.category == "hidden" or spec.is_widget:
                continue
            link = None
            if spec.name in links:
                link_id += 1
                src, slot = links[spec.name]
                link = link_id
                # a link carries its source's type (an input may take several: "INFERIX_VIDEO,VIDEO")
                link_rows.append([link_id, src, slot, nid, len(inputs), schemas[class_of[src]].return_types[slot]])
                outgoing.setdefault((src, slot), []).append(link_id)
            inputs.append({"name": spec.name, "type": spec.type_name, "link": link})
        values: list[Any] = []
        for spec in schema.widget_inputs:
            values.append(widgets[spec.name])
            if spec.options.get("control_after_generate"):
                values.append("fixed")
        names = getattr(classes[class_type], "RETURN_NAMES", schema.return_types)
        node = {
            "id": nid,
            "type": class_type,
            "pos": [0, 0],  # set by lay_out below
            "size": node_size(schema, class_type),
            "flags": {},
            "order": order,
            "mode": 0,
            "inputs": inputs,
            "outputs": [
                {"name": n, "type": t, "slot_index": i, "links": []}
                for i, (n, t) in enumerate(zip(names, schema.return_types))
            ],
            "properties": {"Node name for S&R": class_type},
            "widgets_values": values,
        }
        if class_type == "InferixLoadWorldModel" and models:
            node["properties"]["models"] = models
        ui_nodes.append(node)
    lay_out(ui_nodes, link_rows)
    for node in ui_nodes:
        for out in node["outputs"]:
            out["links"] = outgoing.get((node["id"], out["slot_index"]), []) or None
    return {
        "last_node_id": max(n["id"] for n in ui_nodes),
        "last_link_id": link_id,
        "nodes": ui_nodes,
        "links": link_rows,
        "groups": [],
        "config": {},
        "version": 0.4,
        "extra": {
            "ds": {"scale": 1.0, "offset": [0, 0]},
            "inferix": {"title": SHORT_TITLES[name], "description": title, "api": f"{name}_api.json"},
        },
    }


def main(ui_dir: Path | None = None, api_dir: Path | None = None) -> None:
    from inferix_nodes import NODE_CLASS_MAPPINGS

    classes = {**NODE_CLASS_MAPPINGS, **CORE_NODE_CLASSES}
    schemas = {k: NodeSchema.from_class(k, v) for k, v in classes.items()}
    for folder in (ui_dir or UI_DIR, api_dir or API_DIR):
        folder.mkdir(parents=True, exist_ok=True)
    for name, (title, nodes, models) in GRAPHS.items():
        ui = build_ui(name, title, nodes, models, schemas, classes)
        ui_file, api_file = ui_path(name, title, ui_dir), api_path(name, api_dir)
        ui_file.write_text(json.dumps(ui, indent=2) + "\n", encoding="utf-8")
        api_file.write_text(json.dumps(build_api(nodes, schemas), indent=2) + "\n", encoding="utf-8")
        log.info("wrote %s and %s", ui_file.name, api_file.name)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
