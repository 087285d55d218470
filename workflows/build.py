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
UMT5 = {
    "name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
    "directory": "text_encoders",
    "url": f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files/text_encoders/"
    "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
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
}
SF_LOADER = {**BUNDLED_LOADER, "model": SELF_FORCING["name"], "vae": WAN_VAE["name"], "text_encoder": UMT5["name"]}
DENOISE = {
    "prompt": "a car drives along a winding coastal road at sunset",
    "num_blocks": 7,
    "seconds": 0.0,
    "width": 832,
    "height": 480,
    "denoising_steps": "1000,750,500,250",
    "seed": 42,
}
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

# name -> (title, nodes, models); a node is (id, class_type, widget values, {input: (source id, output index)})
GRAPHS: dict[str, tuple[str, list[tuple[int, str, dict[str, Any], dict[str, tuple[int, int]]]], list[dict]]] = {
    "quickstart": (
        "Quickstart: the bundled world model on CPU",
        [
            (1, "InferixLoadWorldModel", BUNDLED_LOADER, {}),
            (2, "InferixActionSchedule", {"schedule": DRIVE_ACTIONS}, {}),
            (5, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/quickstart"}, {}),
            (
                3,
                "InferixBlockDenoise",
                {**DENOISE, "num_blocks": 14, "width": 64, "height": 64},
                {"world_model": (1, 0), "action_schedule": (2, 0), "stream": (5, 0)},
            ),
            (4, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/quickstart"}, {"video": (3, 2)}),
        ],
        [],
    ),
    "self_forcing_t2v": (
        "Self-Forcing text-to-video (Wan 2.1 1.3B, 4 steps per block)",
        [
            (1, "InferixLoadWorldModel", SF_LOADER, {}),
            (5, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/self_forcing"}, {}),
            (2, "InferixBlockDenoise", DENOISE, {"world_model": (1, 0), "stream": (5, 0)}),
            (3, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/self_forcing"}, {"video": (2, 2)}),
            (4, "InferixProfileReport", {}, {"video": (2, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "long_video": (
        "Long video: rolling window with attention sink and a prompt schedule",
        [
            (1, "InferixLoadWorldModel", SF_LOADER, {}),
            (2, "InferixKVCacheConfig", KV_WINDOW, {"world_model": (1, 0)}),
            (3, "InferixPromptSchedule", {"schedule": LONG_PROMPTS}, {}),
            (6, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/long"}, {}),
            (
                4,
                "InferixBlockDenoise",
                {**DENOISE, "seconds": 30.0},
                {"world_model": (1, 0), "kv_cache": (2, 0), "prompt_schedule": (3, 0), "stream": (6, 0)},
            ),
            (5, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/long"}, {"video": (4, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "interactive": (
        "Interactive: an action-driven world (bundled driving model)",
        [
            (1, "InferixLoadWorldModel", BUNDLED_LOADER, {}),
            (2, "InferixActionSchedule", {"schedule": DRIVE_ACTIONS}, {}),
            (3, "InferixKVCacheConfig", KV_WINDOW, {"world_model": (1, 0)}),
            (6, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/drive", "save_frames": "png"}, {}),
            (
                4,
                "InferixBlockDenoise",
                {**DENOISE, "seconds": 8.0, "width": 64, "height": 64},
                {"world_model": (1, 0), "kv_cache": (3, 0), "action_schedule": (2, 0), "stream": (6, 0)},
            ),
            (5, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/drive"}, {"video": (4, 2)}),
        ],
        [],
    ),
    "low_vram": (
        "Low VRAM: bf16, KV cache offload and int8 quantization under a 2 GiB budget",
        [
            (1, "InferixLoadWorldModel", {**SF_LOADER, "dtype": "bf16"}, {}),
            (
                2,
                "InferixKVCacheConfig",
                {
                    "window_frames": 21,
                    "sink_frames": 3,
                    "page_frames": 3,
                    "offload": "auto",
                    "gpu_budget_gb": 2.0,
                    "quantization": "int8",
                },
                {"world_model": (1, 0)},
            ),
            (6, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/low_vram"}, {}),
            (
                3,
                "InferixBlockDenoise",
                {**DENOISE, "num_blocks": 20},
                {"world_model": (1, 0), "kv_cache": (2, 0), "stream": (6, 0)},
            ),
            (4, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/low_vram"}, {"video": (3, 2)}),
            (5, "InferixProfileReport", {}, {"video": (3, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
    "lvbench_score": (
        "LV-Bench: generate a long video from an LV-Bench prompt set and score its quality drift",
        [
            (1, "InferixLoadWorldModel", SF_LOADER, {}),
            (2, "InferixKVCacheConfig", KV_WINDOW, {"world_model": (1, 0)}),
            (3, "InferixLVBenchPrompts", LVBENCH_PROMPTS, {}),
            (7, "InferixStreamSettings", {**STREAM, "filename_prefix": "inferix/lvbench"}, {}),
            (
                4,
                "InferixBlockDenoise",
                {**DENOISE, "seconds": 30.0},
                {"world_model": (1, 0), "kv_cache": (2, 0), "prompt_schedule": (3, 0), "stream": (7, 0)},
            ),
            (5, "InferixStreamOut", {**STREAM_OUT, "filename_prefix": "inferix/lvbench"}, {"video": (4, 2)}),
            (6, "InferixLVBenchScore", {"metrics": "published (5 VDE metrics)", "chunks": 10}, {"video": (4, 2)}),
        ],
        [SELF_FORCING, WAN_VAE, UMT5],
    ),
}


def card_name(title: str) -> str:
    """A template card's file stem: 'Inferix ' + the title, ':' as ' -', nothing a file system or URL minds."""
    text = "".join(c if c in _CARD_CHARS else " " for c in title.replace(":", " -"))
    return "Inferix " + " ".join(text.split())


def ui_path(name: str, title: str, ui_dir: Path | None = None) -> Path:
    return (ui_dir or UI_DIR) / f"{card_name(title)}.json"


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


def build_ui(
    name: str, title: str, nodes: list, models: list[dict], schemas: dict[str, NodeSchema], classes: dict[str, Any]
) -> dict[str, Any]:
    """UI format (LiteGraph): nodes with sockets and widgets_values, a links table, model download hints."""
    link_rows, ui_nodes, link_id = [], [], 0
    outgoing: dict[tuple[int, int], list[int]] = {}
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
                link_rows.append([link_id, src, slot, nid, len(inputs), spec.type_name])
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
            "pos": [40 + 360 * (order % 4), 60 + 420 * (order // 4)],
            "size": [320, 260],
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
        "extra": {"ds": {"scale": 1.0, "offset": [0, 0]}, "inferix": {"title": title, "api": f"{name}_api.json"}},
    }


def main(ui_dir: Path | None = None, api_dir: Path | None = None) -> None:
    from inferix_nodes import NODE_CLASS_MAPPINGS

    schemas = {k: NodeSchema.from_class(k, v) for k, v in NODE_CLASS_MAPPINGS.items()}
    for folder in (ui_dir or UI_DIR, api_dir or API_DIR):
        folder.mkdir(parents=True, exist_ok=True)
    for name, (title, nodes, models) in GRAPHS.items():
        ui = build_ui(name, title, nodes, models, schemas, NODE_CLASS_MAPPINGS)
        ui_file, api_file = ui_path(name, title, ui_dir), api_path(name, api_dir)
        ui_file.write_text(json.dumps(ui, indent=2) + "\n", encoding="utf-8")
        api_file.write_text(json.dumps(build_api(nodes, schemas), indent=2) + "\n", encoding="utf-8")
        log.info("wrote %s and %s", ui_file.name, api_file.name)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
