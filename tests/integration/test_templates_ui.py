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

Screenshots (1200x750, 256 colours) of the loaded Self-Forcing graph and of its error dialog / overlay go
to a temp dir, or with INFERIX_UPDATE_DOC_IMAGES=1 to docs/images/template_graph.png and
template_error_v<ComfyUI version>.png. The module has its own ComfyUI server (conftest.launch), so the
model folders hold exactly what each step needs, and one Chromium. Skipped without COMFYUI_DIR /
COMFYUI_PYTHON, a Chromium or websocket-client.
"""

from __future__ import annotations

import contextlib
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
# frontend 1.45's list of missing model files (its missingModel store: "name@node id"), null before 1.45
MISSING_MODELS = """(() => {
  const pinia = [...document.querySelectorAll('body, body > *')].find((e) => e.__vue_app__)
    ?.__vue_app__.config.globalProperties.$pinia;
  const store = pinia && [...pinia._s.values()].find((s) => 'missingModelCandidates' in s);
  return store ? (store.missingModelCandidates || []).map((c) => c.name + '@' + c.nodeId) : null;
})()"""
EMPTY = json.dumps({"last_node_id": 0, "last_link_id": 0, "nodes": [], "links": [], "groups": [], "version": 0.4})
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
    # every test here needs the browser: skip before starting a server without one
    if _chromium() is None:
        pytest.skip("no Chromium (set INFERIX_CHROMIUM or put chromium on PATH) for the browser test")
    pytest.importorskip("websocket", reason="the browser test drives Chromium with websocket-client")
    with launch(tmp_path_factory.mktemp("comfyui_ui_base")) as s:
        yield s


@pytest.fixture(scope="module")
def page(server):
    status, _ = server.post_json("/settings", {**UI_SETTINGS, **QUIET})
    assert status == 200
    b = Browser(_chromium(), SHOT_W, SHOT_H)
    try:
        b.send("Page.navigate", url=server.url + "/")
        b.wait_for("!!(window.app?.graph && window.comfyAPI?.api?.api)", 180, "the ComfyUI page")
        # The default workflow names models of its own. Frontend 1.45 checks them in the background and adds
        # those it finds missing to the workflow active when the check ends, which may be our template's by
        # then: wait for that check, then replace the default workflow with an empty graph (which clears it).
        with contextlib.suppress(AssertionError):
            b.wait_for(f"(() => {{ const m = {MISSING_MODELS}; return m === null || m.length > 0; }})()", 30, "")
        b.eval(f"app.loadGraphData({EMPTY})")
        b.wait_for(f"(() => {{ const m = {MISSING_MODELS}; return m === null || m.length === 0; }})()", 30, "")
        assert b.eval("app.graph.nodes.length") == 0
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
      // what the node's inputs, outputs and widgets need (computeSize): a node drawn smaller than that
      // spills, so its box is taken at least that large
      const need = n.computeSize ? [...n.computeSize()] : [0, 0];
      r[2] += Math.max(0, need[0] - n.size[0]);
      r[3] += Math.max(0, need[1] - n.size[1]);
      return {id: n.id, type: n.comfyClass || n.type, title: n.title, box: r, size: [...n.size], need};
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
        new = [
            h for pid, h in history.items() if pid not in before and h.get("status", {}).get("completed") is not None
        ]
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
    time.sleep(2)  # frontend 1.45 lists missing files in the background
    listed = page.eval(MISSING_MODELS)
    foreign = 0
    if listed is not None:  # frontend 1.45: each file the template's loader names, once, on that node
        ours = [m for m in listed if m.rsplit("@", 1)[0] in missing]
        assert sorted(ours) == sorted(f"{name}@1" for name in missing), listed
        # the default workflow's files, should its background check end after we replaced it (see docs)
        foreign = len(listed) - len(ours)

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
    # the front end shows it once: frontend 1.27 (v0.3.64) in its error dialog; 1.45 (v0.27) in the errors
    # overlay ("N ERRORS"), beside its own count of the missing files it finds in the template's node
    # properties ("3 required models are missing"), then in the Errors tab of the side panel
    panel = page.wait_for(
        """(() => {
          const leaves = [...document.querySelectorAll('body *')].filter((e) => e.getClientRects().length
            && e.innerText?.includes('model file(s) not found')
            && ![...e.children].some((c) => c.innerText?.includes('model file(s) not found')));
          for (const leaf of leaves) {
            const dialog = leaf.closest('.p-dialog, [role=dialog]');
            if (dialog) return {kind: 'dialog', text: dialog.innerText};
            for (let e = leaf; e && e !== document.body; e = e.parentElement)
              if (/^\\s*\\d+ ERRORS?\\b/i.test(e.innerText)) return {kind: 'overlay', text: e.innerText};
          }
          return null;
        })()""",
        60,
        "the error dialog or overlay with the missing-files message",
    )
    text = panel["text"]
    assert text.count("model file(s) not found") == 1, text
    for name in missing:
        assert text.count(name) == 1, (name, text)
    version = server.get_json("/system_stats")["system"]["comfyui_version"]
    shot = _shot(page, image_dir / f"template_error_v{version}.png")
    assert 0 < shot.stat().st_size <= MAX_SHOT_BYTES, shot.stat().st_size
    if panel["kind"] == "overlay":
        count = 3 + foreign
        assert f"{count + 1} ERRORS" in text.upper() and f"{count} required models are missing" in text, text
        page.eval("[...document.querySelectorAll('button')].find((b) => b.innerText.trim() === 'See Errors').click()")
        tab = page.wait_for(
            "document.body.innerText.includes('Missing Models (') && document.body.innerText", 30, "the Errors tab"
        )
        assert f"Missing Models ({count})" in tab, tab
        for name in missing:
            assert f"{name} (1)" in tab, (name, tab)


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem.removeprefix("Inferix ") for p in TEMPLATES])
def test_template_nodes_do_not_overlap_in_the_ui(page, path):
    _load(page, path)
    boxes = _boxes(page)
    assert len(boxes) == len(_ui(path)["nodes"])
    overlaps = _overlaps(boxes)
    assert not overlaps, f"{path.stem}:\n" + "\n".join(overlaps)


def test_the_overlap_check_sees_a_moved_node(page):
    """The check reads the live boxes: a node dragged onto another is reported with both names."""
    path = next(p for p in TEMPLATES if p.stem.startswith("Inferix Quickstart"))
    _load(page, path)
    assert not _overlaps(_boxes(page))
    page.eval("""(() => {
      const [a, b] = app.graph.nodes;
      b.pos = [a.pos[0] + 30, a.pos[1] + 30];
      app.canvas.setDirty(true, true);
    })()""")
    page.eval("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    overlaps = _overlaps(_boxes(page))
    assert len(overlaps) >= 1 and "overlaps node" in overlaps[0], overlaps


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


def test_two_bad_inputs_give_one_message_each_on_their_own_input(server, page):
    """Validation errors in the page's node_errors: one per cause, each on the input that caused it.

    ComfyUI pins a node's validate_inputs message on every input the validator names, so Block Denoise's
    names `denoising_steps` only; `width` out of its range is ComfyUI's own check.
    """
    path = next(p for p in TEMPLATES if p.stem.startswith("Inferix Quickstart"))
    _load(page, path)
    denoise = next(str(n["id"]) for n in _ui(path)["nodes"] if n["type"] == "InferixBlockDenoise")
    _set_widgets(page, {(denoise, "denoising_steps"): "1000,abc", (denoise, "width"): 100000})
    page.eval("app.lastNodeErrors = null")
    page.eval("app.queuePrompt(0)")
    errors = page.wait_for(
        "app.lastNodeErrors && Object.keys(app.lastNodeErrors).length && JSON.parse(JSON.stringify(app.lastNodeErrors))",
        60,
        "node_errors",
    )
    assert list(errors) == [denoise], errors
    assert "errors" in errors[denoise], json.dumps(errors)
    pinned = sorted(
        (e.get("extra_info", {}).get("input_name"), f"{e['message']}: {e['details']}")
        for e in errors[denoise]["errors"]
    )
    assert [name for name, _ in pinned] == ["denoising_steps", "width"], pinned
    assert "abc" in pinned[0][1] and "100000" in pinned[1][1], pinned
    page.eval(f"(() => {{ {CLOSE_DIALOGS} }})()")
