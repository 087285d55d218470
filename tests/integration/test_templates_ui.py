"""Every template in the real ComfyUI front end (headless Chromium): no overlapping nodes, queued, errors once.

Issue #52, "a ComfyUI user's first hour, in the real UI". For each `example_workflows/*.json`:

* loaded into the page with `app.loadGraphData` (what a Templates card does; test_templates.py clicks the
  cards), every node's bounding box is read from the live graph once the front end has drawn it (sizes
  grown to fit its widgets, title bar included) and no two boxes may overlap;
* queued from the page (`app.queuePrompt`) and run to `success` in the server's history: templates on the
  bundled model as they are, the others on the tiny stand-in model files of test_all_workflows.py under the
  names they pick, each shrunk like there (64x64, two blocks, our seed and filename prefix). The three with
  core image nodes (Matrix-Game 2.0, LongLive 2.0 image-to-video) are loaded and checked, not queued: they
  need a start image and a CLIP vision stand-in (run headless in tests/test_matrix_game2_e2e.py);
* the Self-Forcing template, queued before any stand-in is there, must fail with one message naming all
  three missing files, shown once in the error panel, pinned on no input (no per-input validation errors).

Screenshots (1200x750, 256 colours) of the loaded Self-Forcing graph and of its error panel go to a temp
dir, or with INFERIX_UPDATE_DOC_IMAGES=1 to docs/images/template_graph.png and template_error.png. Its own
ComfyUI server (conftest.launch), so the model folders hold exactly what each step needs; one Chromium for
the module. Skipped without COMFYUI_DIR / COMFYUI_PYTHON, a Chromium or websocket-client.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.integration.conftest import launch
from tests.integration.test_all_workflows import _overrides, stand_ins  # noqa: F401 - the fixture
from tests.integration.test_web_extension import UI_SETTINGS, Browser, _chromium, _fit_view

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((REPO / "example_workflows").glob("*.json"))
API_DIR = REPO / "workflows" / "api"
DOC_IMAGES = REPO / "docs" / "images"
SHOT_W, SHOT_H = 1200, 750
MAX_SHOT_BYTES = 80 * 1024
MISSING_WEIGHTS = "Inferix Self-Forcing text-to-video"  # needs three model files the repository lacks
QUIET = {
    "Comfy.Workflow.ShowMissingModelsWarning": False,
    "Comfy.Workflow.ShowMissingNodesWarning": False,
    "LiteGraph.Canvas.MinFontSizeForLOD": 0,  # text drawn at every zoom (frontend >= 1.26.7), for the screenshot
    "Comfy.Graph.CanvasInfo": False,
}
RUN_TIMEOUT_S = 300
# close whatever dialog is open (an error dialog of the previous template)
CLOSE_DIALOGS = """document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, [aria-label=Close]')
  .forEach((b) => b.click())"""


def _ui(path: Path) -> dict:
    return json.loads(path.read_text())


def _api_twin(path: Path) -> dict:
    return json.loads((API_DIR / _ui(path)["extra"]["inferix"]["api"]).read_text())


def _core_nodes(path: Path) -> list[str]:
    return sorted({n["type"] for n in _ui(path)["nodes"] if not n["type"].startswith("Inferix")})


QUEUED = [p for p in TEMPLATES if not _core_nodes(p)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with launch(tmp_path_factory.mktemp("comfyui_ui_base")) as s:
        yield s


@pytest.fixture(scope="module")
def page(server):
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium (set INFERIX_CHROMIUM or put chromium on PATH) for the browser test")
    pytest.importorskip("websocket", reason="the browser test drives Chromium with websocket-client")
    status, _ = server.post_json("/settings", {**UI_SETTINGS, **QUIET})
    assert status == 200
    b = Browser(executable, SHOT_W, SHOT_H)
    try:
        b.send("Page.navigate", url=server.url + "/")
        b.wait_for("!!(window.app?.graph && window.comfyAPI?.api?.api)", 180, "the ComfyUI page")
        b.eval("""(() => {
          const api = window.comfyAPI.api.api;
          window.__inferixUi = [];
          for (const t of ['execution_start', 'execution_success', 'execution_error', 'execution_interrupted'])
            api.addEventListener(t, (e) => window.__inferixUi.push({type: t, detail: e.detail}));
        })()""")
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    return DOC_IMAGES if os.environ.get("INFERIX_UPDATE_DOC_IMAGES") == "1" else tmp_path_factory.mktemp("shots")


def _load(page: Browser, path: Path) -> None:
    page.eval(f"(() => {{ {CLOSE_DIALOGS} }})()")
    workflow = _ui(path)
    page.eval(f"app.loadGraphData({json.dumps(workflow)}, true, true, {json.dumps(path.stem)})")
    classes = page.wait_for(
        "app.graph.nodes.length && app.graph.nodes.map((n) => n.comfyClass || n.type)", 60, f"the graph of {path.stem}"
    )
    assert sorted(classes) == sorted(n["type"] for n in workflow["nodes"]), path.stem
    # two frames drawn: the front end has grown each node to fit its widgets (and our DOM panels)
    page.eval("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    time.sleep(0.3)


def _boxes(page: Browser) -> list[dict]:
    """Every node's box in graph units, title bar included (LiteGraph's boundingRect / getBounding)."""
    return page.eval("""app.graph.nodes.map((n) => {
      const r = n.boundingRect ? [...n.boundingRect] : (() => { const b = new Float32Array(4); n.getBounding(b); return [...b]; })();
      return {id: n.id, type: n.comfyClass || n.type, title: n.title, box: r, size: [...n.size]};
    })""")


def _overlaps(boxes: list[dict]) -> list[str]:
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            (ax, ay, aw, ah), (bx, by, bw, bh) = a["box"], b["box"]
            dx = min(ax + aw, bx + bw) - max(ax, bx)
            dy = min(ay + ah, by + bh) - max(ay, by)
            if dx > 0.5 and dy > 0.5:
                found.append(
                    f"node {a['id']} ({a['type']}, box {[round(v) for v in a['box']]}) overlaps node {b['id']} "
                    f"({b['type']}, box {[round(v) for v in b['box']]}) by {dx:.0f}x{dy:.0f} px"
                )
    return found


def _shot(page: Browser, path: Path) -> Path:
    """A screenshot as a 256-colour PNG (the committed ones stay small)."""
    import base64

    from PIL import Image

    data = base64.b64decode(page.send("Page.captureScreenshot", format="png")["data"])
    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").quantize(256).save(buf, format="PNG", optimize=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def _set_widgets(page: Browser, sets: dict[tuple[str, str], object]) -> None:
    missing = page.eval(f"""(() => {{
      const missing = [];
      for (const [id, name, value] of {json.dumps([[i, n, v] for (i, n), v in sets.items()])}) {{
        const node = app.graph.getNodeById(Number(id));
        const w = node?.widgets?.find((w) => w.name === name);
        if (!w) {{ missing.push(id + '.' + name); continue; }}
        w.value = value;
      }}
      return missing;
    }})()""")
    assert not missing, f"no such widgets: {missing}"


def _shrunk(path: Path, prefix: str) -> dict[tuple[str, str], object]:
    """test_all_workflows' `--set` overrides of the API twin, as (node id, widget) -> value."""
    args = _overrides(_api_twin(path), prefix)
    sets = {}
    for arg in args[2::2]:  # ["--no-progress", "--set", "ID.NAME=JSON", "--set", ...]
        target, value = arg.split("=", 1)
        nid, name = target.split(".", 1)
        sets[(nid, name)] = json.loads(value)
    return sets


def _queue(page: Browser, server, what: str) -> dict:
    """Queue the page's graph (app.queuePrompt) and wait for the prompt's end: its /history entry."""
    before = set(server.get_json("/history?max_items=1000"))
    page.eval("window.__inferixUi.length = 0; app.lastNodeErrors = null")
    page.eval("app.queuePrompt(0)")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        errors = page.eval("app.lastNodeErrors && Object.keys(app.lastNodeErrors).length ? app.lastNodeErrors : null")
        assert not errors, f"{what}: the server refused the prompt: {json.dumps(errors)}"
        history = server.get_json("/history?max_items=1000")
        new = [h for pid, h in history.items() if pid not in before and h.get("status", {}).get("completed") is not None]
        done = [h for h in new if h["status"].get("status_str") in ("success", "error")]
        if done:
            return done[0]
        assert time.monotonic() < deadline, f"{what}: no result within {RUN_TIMEOUT_S} s\n{server.log_tail()}"
        time.sleep(0.5)


def test_a_template_missing_its_weights_fails_with_one_message(server, page, image_dir):
    path = next(p for p in TEMPLATES if p.stem == MISSING_WEIGHTS)
    missing = sorted(
        v
        for n in _api_twin(path).values()
        if n["class_type"] == "InferixLoadWorldModel"
        for k, v in n["inputs"].items()
        if k in ("model", "vae", "text_encoder", "preview_decoder") and v not in ("none", "bundled")
    )
    assert len(missing) == 3, missing
    for name in missing:
        assert not list((server.base_dir / "models").rglob(name)), f"{name} must be missing for this test"
    _load(page, path)
    _fit_view(page)
    _shot(page, image_dir / "template_graph.png")

    entry = _queue(page, server, path.stem)
    assert entry["status"]["status_str"] == "error", entry["status"]
    errors = [m[1] for m in entry["status"]["messages"] if m[0] == "execution_error"]
    assert len(errors) == 1, entry["status"]["messages"]
    error = errors[0]
    assert error["node_type"] == "InferixLoadWorldModel", error
    message = error["exception_message"]
    assert "3 model file(s) not found" in message, message
    for name in missing:
        assert message.count(name) == 1, (name, message)
    # nothing pinned on inputs: no validation errors, so no per-input copies of the message
    assert not page.eval("app.lastNodeErrors && Object.keys(app.lastNodeErrors).length"), page.eval(
        "app.lastNodeErrors"
    )
    # the front end shows it: the error dialog / panel names each file once, with the message once
    panel = page.wait_for(
        """(() => {
          const shown = [...document.querySelectorAll('[role=dialog], .p-dialog, .p-toast, [class*=error]')]
            .filter((e) => e.getClientRects().length);
          // the outermost shown elements, each once (a dialog and its error part are one panel)
          const text = shown.filter((e) => !shown.some((o) => o !== e && o.contains(e)))
            .map((e) => e.innerText).join('\\n');
          return text.includes('model file(s) not found') ? text : null;
        })()""",
        60,
        "the error panel with the missing-files message",
    )
    assert panel.count("model file(s) not found") == 1, panel
    for name in missing:
        assert panel.count(name) == 1, (name, panel)
    shot = _shot(page, image_dir / "template_error.png")
    assert 0 < shot.stat().st_size <= MAX_SHOT_BYTES, shot.stat().st_size


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem.removeprefix("Inferix ") for p in TEMPLATES])
def test_template_nodes_do_not_overlap_in_the_ui(page, path):
    _load(page, path)
    boxes = _boxes(page)
    assert len(boxes) == len(_ui(path)["nodes"])
    overlaps = _overlaps(boxes)
    assert not overlaps, f"{path.stem}:\n" + "\n".join(overlaps)


@pytest.fixture(scope="module")
def stand_in_models(server, stand_ins):  # noqa: F811 - the fixture
    for (folder, _name), src in stand_ins.items():
        dest = server.base_dir / "models" / folder
        dest.mkdir(parents=True, exist_ok=True)
        for f in src.parent.iterdir():  # the file and any config.json beside it
            if not (dest / f.name).exists():
                shutil.copyfile(f, dest / f.name)
    return server.base_dir / "models"


@pytest.mark.parametrize("path", QUEUED, ids=[p.stem.removeprefix("Inferix ") for p in QUEUED])
def test_template_queued_from_the_ui_runs(server, page, stand_in_models, path):
    _load(page, path)
    name = _ui(path)["extra"]["inferix"]["api"].removesuffix("_api.json")
    _set_widgets(page, _shrunk(path, f"inferix/ui_{name}"))
    entry = _queue(page, server, path.stem)
    assert entry["status"]["status_str"] == "success", (path.stem, entry["status"], server.log_tail())
    assert entry["outputs"], f"{path.stem}: no outputs"
