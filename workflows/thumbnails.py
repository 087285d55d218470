"""Render the template cards' thumbnails from real output: each workflow run headless on the bundled model.

ComfyUI's Templates dialog shows `example_workflows/<card>.jpg` beside `<card>.json` (the front end asks
for `/api/workflow_templates/<pack>/<card>.jpg`). For each card this runs the nodes its Block Denoise
depends on, with Inferix Load World Model switched to the bundled model (the Self-Forcing weights are not
in the repository, so those cards show the bundled world with the workflow's own actions and cache settings;
the bundled model has no text encoder, so prompt schedules are left out) at 64×64 for at most MAX_BLOCKS
blocks, and tiles four of the generated frames, first to last, into a 512×512 JPEG.

    python workflows/thumbnails.py            # all cards; about a minute on 2 CPU cores
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
UI_DIR = HERE.parent / "example_workflows"
API_DIR = HERE / "api"
SIZE = 512  # px, the thumbnail's side
TILES = 2  # frames per side
MAX_BLOCKS = 8  # enough motion to see, quick on a CPU


def upstream(workflow: dict[str, Any], node_id: str) -> dict[str, Any]:
    """The node and every node it depends on (links are [source id, output index])."""
    keep, todo = {}, [node_id]
    while todo:
        nid = todo.pop()
        if nid in keep:
            continue
        keep[nid] = workflow[nid]
        todo += [v[0] for v in workflow[nid]["inputs"].values() if isinstance(v, list) and len(v) == 2]
    return keep


def render_frames(api: dict[str, Any], node_classes: dict[str, Any]) -> Any:
    """uint8 frames [T, H, W, 3] of the workflow's Block Denoise (or Branch World's futures), on the bundled model."""
    # the last Block Denoise: with several (a continued world) it is the one the others feed
    denoisers = [nid for nid, n in api.items() if n["class_type"] == "InferixBlockDenoise"]
    branch = [nid for nid, n in api.items() if n["class_type"] == "InferixBranchWorld"]
    api = json.loads(json.dumps(api))
    if not denoisers:  # Branch World: its side-by-side futures (output 0)
        node = api[branch[-1]]
        node["inputs"] |= {"width": 64, "height": 64, "past_blocks": 2, "future_blocks": 2}
        node["inputs"].pop("conditioning", None)
        return _run(upstream(api, branch[-1]), branch[-1], 0, node_classes)
    denoise = denoisers[-1]
    inputs = api[denoise]["inputs"]
    inputs |= {"width": 64, "height": 64, "num_blocks": min(int(inputs["num_blocks"]), MAX_BLOCKS), "seconds": 0.0}
    for unused in ("stream", "prompt_schedule", "conditioning"):  # nothing written; the bundled model has no text
        inputs.pop(unused, None)
    loaders = [n for n in api.values() if n["class_type"] == "InferixLoadWorldModel"]
    if any(n["inputs"].get("model") != "bundled" for n in loaders):
        # a real model's start image, CLIP vision and key/mouse schedule mean nothing to the bundled world
        for unused in ("start_image", "clip_vision", "clip_vision_output", "action_schedule", "start_frames"):
            inputs.pop(unused, None)
    for nid, node in api.items():  # LoRA nodes pass the loader's model through: the bundled model takes none
        if node["class_type"] == "InferixLoadWorldModelLoRA":
            source = node["inputs"]["world_model"]
            for other in api.values():
                for key, value in other["inputs"].items():
                    if value == [nid, 0]:
                        other["inputs"][key] = source
    graph = upstream(api, denoise)
    graph["thumbnail_report"] = {"class_type": "InferixProfileReport", "inputs": {"video": [denoise, 2]}}  # an output
    return _run(graph, denoise, 1, node_classes)


def _run(graph: dict[str, Any], node_id: str, output: int, node_classes: dict[str, Any]) -> Any:
    """Run `graph` on the bundled model on the CPU; uint8 frames of `node_id`'s IMAGE output `output`."""
    from inferix_core.workflow import execute

    for node in graph.values():
        if node["class_type"] == "InferixLoadWorldModel":
            node["inputs"] |= {
                "model": "bundled",
                "vae": "bundled",
                "text_encoder": "bundled",
                "preview_decoder": "none",
            }
            node["inputs"] |= {"device": "cpu", "dtype": "fp32", "fp8": False, "compile": False}
    with tempfile.TemporaryDirectory(prefix="inferix_thumbnail_") as scratch:  # previews go there, not the repo
        result = execute(graph, node_classes, output_dir=Path(scratch) / "output", progress=False)
    return (result.outputs[node_id][output].clamp(0, 1) * 255).round().byte().numpy()


def tile(frames: Any) -> Any:
    """TILES×TILES frames, evenly spaced first to last, as one SIZE×SIZE PIL image."""
    from PIL import Image

    count = TILES * TILES
    picks = [round(i * (len(frames) - 1) / (count - 1)) for i in range(count)]
    cell = SIZE // TILES
    sheet = Image.new("RGB", (SIZE, SIZE))
    for i, index in enumerate(picks):
        image = Image.fromarray(frames[index]).resize((cell, cell), Image.Resampling.BICUBIC)
        sheet.paste(image, ((i % TILES) * cell, (i // TILES) * cell))
    return sheet


def main(ui_dir: Path = UI_DIR, api_dir: Path = API_DIR) -> list[Path]:
    from inferix_nodes import NODE_CLASS_MAPPINGS

    written = []
    for card in sorted(ui_dir.glob("*.json")):
        api_name = json.loads(card.read_text())["extra"]["inferix"]["api"]
        api = json.loads((api_dir / api_name).read_text())
        out = card.with_suffix(".jpg")
        tile(render_frames(api, NODE_CLASS_MAPPINGS)).save(out, format="JPEG", quality=85, optimize=True)
        log.info("wrote %s", out.name)
        written.append(out)
    return written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
