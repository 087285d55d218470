"""Each shipped workflow: the UI file (a template card) and its API twin describe the same graph, and both validate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferix_core.workflow.schema import types_match

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / "workflows"
CARDS = REPO / "example_workflows"  # what ComfyUI shows as the pack's templates: UI format only
API_FILES = sorted((WORKFLOWS / "api").glob("*_api.json"))
USE_CASES = {
    "quickstart",
    "self_forcing_t2v",
    "long_video",
    "interactive",
    "low_vram",
    "lvbench_score",
    "longlive_lora",
    "causal_forcing_t2v",
    "matrix_game2_universal",
    "matrix_game2_gta_drive",
    "longlive2_t2v",
    "longlive2_i2v",
    "continue_world",
    "branch_world",
}
# folders ComfyUI scans for a pack's templates (app/custom_node_manager.py, v0.3.64 and v0.27)
SCANNED = ("example_workflows", "example", "examples", "workflow", "workflows")


def ui_twin(api_file: Path) -> Path:
    """The template card whose `extra.inferix.api` names this API file."""
    cards = [p for p in CARDS.glob("*.json") if json.loads(p.read_text())["extra"]["inferix"]["api"] == api_file.name]
    assert len(cards) == 1, f"{api_file.name}: {len(cards)} UI twins in example_workflows/"
    return cards[0]


def load_build():
    import importlib.util

    spec = importlib.util.spec_from_file_location("workflows_build", WORKFLOWS / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


@pytest.fixture(scope="module")
def with_core_nodes(node_classes):
    """The pack's nodes plus the interfaces of the core nodes (Load Image, Load CLIP Vision) some workflows use."""
    return {**node_classes, **load_build().CORE_NODE_CLASSES}


def graph(workflow: dict) -> dict:
    return {nid: (node["class_type"], node["inputs"]) for nid, node in workflow.items()}


def test_every_use_case_ships_both_formats():
    assert {p.name.removesuffix("_api.json") for p in API_FILES} >= USE_CASES
    assert len(list(CARDS.glob("*.json"))) == len(API_FILES)
    for api_file in API_FILES:
        ui_twin(api_file)


def test_template_folders_hold_ui_workflows_only():
    """No API-format file where ComfyUI would show it as a template card (it would open an empty graph)."""
    for folder in SCANNED:
        for path in (REPO / folder).glob("*.json"):
            workflow = json.loads(path.read_text())
            assert "nodes" in workflow and "links" in workflow, f"{path.relative_to(REPO)} is not a UI workflow"
            assert folder == "example_workflows", f"{path.relative_to(REPO)}: UI workflows go to example_workflows/"
            assert path.stem.startswith("Inferix ") and workflow["extra"]["inferix"]["title"]  # the card's title
            thumbnail = path.with_suffix(".jpg")  # what the Templates dialog shows (workflows/thumbnails.py)
            assert thumbnail.is_file() and thumbnail.read_bytes()[:3] == b"\xff\xd8\xff", thumbnail.name


@pytest.fixture
def downloaded_models(tmp_path, monkeypatch):
    """Empty stand-ins for every file the workflows' download hints name, in $INFERIX_MODELS_DIR."""
    for ui_file in CARDS.glob("*.json"):
        for node in json.loads(ui_file.read_text()).get("nodes", []):
            for model in node.get("properties", {}).get("models", []):
                path = tmp_path / model["directory"] / model["name"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    monkeypatch.setenv("INFERIX_MODELS_DIR", str(tmp_path))


@pytest.mark.parametrize("api_file", API_FILES, ids=lambda p: p.stem)
def test_ui_and_api_twins_match_and_validate(api_file, with_core_nodes, downloaded_models):
    from inferix_core.workflow import load_workflow, validate

    api = json.loads(api_file.read_text())
    assert graph(load_workflow(ui_twin(api_file), with_core_nodes)) == graph(api)
    validate(api, with_core_nodes)
    assert any(getattr(with_core_nodes[n["class_type"]], "OUTPUT_NODE", False) for n in api.values())


@pytest.mark.parametrize("api_file", API_FILES, ids=lambda p: p.stem)
def test_ui_files_carry_download_hints(api_file):
    ui = json.loads(ui_twin(api_file).read_text())
    for node in ui["nodes"]:
        for model in node.get("properties", {}).get("models", []):
            assert model["url"].startswith("https://") and model["url"].endswith(model["name"])
            assert model["directory"] in {
                "diffusion_models",
                "vae",
                "text_encoders",
                "vae_approx",
                "loras",
                "clip_vision",
            }
        names = [i["name"] for i in node["inputs"]]
        assert len(names) == len(set(names))
    for link_id, src, src_slot, dst, dst_slot, kind in ui["links"]:
        nodes = {n["id"]: n for n in ui["nodes"]}
        assert nodes[src]["outputs"][src_slot]["type"] == kind
        assert types_match(kind, nodes[dst]["inputs"][dst_slot]["type"])
        assert nodes[dst]["inputs"][dst_slot]["link"] == link_id


def test_workflows_are_up_to_date(tmp_path, monkeypatch):
    """workflows/build.py regenerates exactly the committed files."""
    build = load_build()
    build.main(ui_dir=tmp_path / "ui", api_dir=tmp_path / "api")
    for produced, committed in ((tmp_path / "ui", CARDS), (tmp_path / "api", WORKFLOWS / "api")):
        assert sorted(p.name for p in produced.glob("*.json")) == sorted(p.name for p in committed.glob("*.json"))
        for path in produced.glob("*.json"):
            assert path.read_text() == (committed / path.name).read_text(), path.name


def test_template_titles_are_short_and_keep_the_sentence_as_description():
    """The Templates dialog titles a pack's card with its file name and cuts long ones (issue #52)."""
    build = load_build()
    for path in CARDS.glob("*.json"):
        info = json.loads(path.read_text())["extra"]["inferix"]
        assert path.stem == f"Inferix {info['title']}" and len(path.stem) <= build.MAX_TITLE, path.name
        assert len(info["description"]) > len(info["title"]), path.name  # the whole sentence, kept
        assert (CARDS / f"{path.stem}.jpg").is_file(), f"{path.stem}.jpg: the card's thumbnail"


def test_shipped_ui_workflows_have_no_overlapping_nodes():
    """Boxes (title bar included) at the sizes written, which hold what the UI adds (issue #52)."""
    from inferix_core.workflow.ui_format import node_box

    for path in CARDS.glob("*.json"):
        nodes = json.loads(path.read_text())["nodes"]
        for node in nodes:  # at least LiteGraph's own size: 20 px a slot row, 24 a widget, a preview on outputs
            slots = max(len(node.get("inputs", [])), len(node.get("outputs", [])))
            least = 20 * slots + 24 * len(node.get("widgets_values", []))
            assert node["size"][1] >= least and node["size"][0] >= 300, (path.name, node["type"], node["size"])
        boxes = [(node["type"], node_box(node)) for node in nodes]
        for i, (name_a, a) in enumerate(boxes):
            for name_b, b in boxes[i + 1 :]:
                apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
                assert apart, f"{path.name}: {name_a} {a} overlaps {name_b} {b}"
