"""The node pack inside a real ComfyUI server, and `inferix queue` against it.

Skipped unless COMFYUI_DIR and COMFYUI_PYTHON are set (see conftest.py and docs/comfyui_integration.md).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from inferix_core.commands.run import load_node_classes

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# API format first: it is what ComfyUI's own Export (API) writes; the UI twin is converted by `inferix queue`.
BUNDLED_MODEL = REPO / "inferix_core" / "assets" / "bundled" / "transformer.safetensors"
QUICKSTART = sorted(REPO.glob("workflows/api/*quickstart*.json")) + sorted(
    REPO.glob("example_workflows/*Quickstart*.json")
)

# Core nodes only: proves the client without any model file.
CORE_WORKFLOW = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 1, "color": 0x3366FF}},
    "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "inferix_it"}},
}


def write(tmp_path: Path, workflow: dict) -> str:
    path = tmp_path / "workflow.json"
    path.write_text(json.dumps(workflow))
    return str(path)


def test_pack_nodes_are_registered(comfyui, object_info):
    log = comfyui.log_path.read_text(errors="replace")
    failures = [
        line
        for line in log.splitlines()
        if "ComfyUI-Inferix" in line and ("IMPORT FAILED" in line or "Cannot import" in line)
    ]
    assert not failures, "ComfyUI could not import the pack:\n" + "\n".join(failures)
    ours = sorted(k for k in object_info if k.startswith("Inferix"))
    assert ours, f"no Inferix nodes in /object_info; server log:\n{comfyui.log_tail()}"
    missing = set(load_node_classes()) - set(object_info)
    assert not missing, f"NODE_CLASS_MAPPINGS entries missing from /object_info: {sorted(missing)}"


def test_queue_core_workflow_end_to_end(comfyui, tmp_path):
    out = tmp_path / "downloads"
    proc = comfyui.inferix(
        "queue",
        write(tmp_path, CORE_WORKFLOW),
        "--server",
        comfyui.url,
        "--output-dir",
        str(out),
        "--timeout",
        "120",
        "--set",
        "1.width=40",
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    prompt_id = proc.stdout.split("queued prompt ")[1].split()[0]
    history = comfyui.get_json(f"/history/{prompt_id}")[prompt_id]
    [image] = history["outputs"]["2"]["images"]
    downloaded = out / image["filename"]
    assert downloaded.is_file() and str(downloaded) in proc.stdout
    assert downloaded.read_bytes() == (comfyui.output_dir / image["subfolder"] / image["filename"]).read_bytes()
    assert history["prompt"][2]["1"]["inputs"]["width"] == 40  # the --set override reached the server


def test_validation_error_exits_non_zero_with_server_message(comfyui, tmp_path):
    bad = json.loads(json.dumps(CORE_WORKFLOW))
    bad["1"]["inputs"]["width"] = 0
    proc = comfyui.inferix("queue", write(tmp_path, bad), "--server", comfyui.url, "--timeout", "60")
    assert proc.returncode == 2
    assert "the server refused the workflow" in proc.stderr
    assert "node 1 (EmptyImage), input 'width': Value 0 smaller than min of 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_execution_error_exits_non_zero_with_server_message(comfyui, tmp_path):
    bad = json.loads(json.dumps(CORE_WORKFLOW))
    bad["2"]["inputs"]["filename_prefix"] = "../../escape"  # SaveImage refuses at run time, not validation
    proc = comfyui.inferix("queue", write(tmp_path, bad), "--server", comfyui.url, "--timeout", "120")
    assert proc.returncode == 2
    assert "SaveImage failed on the server" in proc.stderr and "outside the output folder" in proc.stderr


def test_unknown_inferix_node_refused_by_server(comfyui, tmp_path):
    bad = {**CORE_WORKFLOW, "3": {"class_type": "InferixNoSuchNode", "inputs": {}}}
    proc = comfyui.inferix("queue", write(tmp_path, bad), "--server", comfyui.url, "--timeout", "60")
    assert proc.returncode == 2 and "InferixNoSuchNode" in proc.stderr


@pytest.mark.skipif(not QUICKSTART, reason="no quickstart workflow yet")
@pytest.mark.skipif(not BUNDLED_MODEL.is_file(), reason=f"the quickstart needs the bundled model ({BUNDLED_MODEL})")
def test_queue_quickstart_produces_mp4(comfyui, tmp_path):
    out = tmp_path / "downloads"
    proc = comfyui.inferix(
        "queue",
        str(QUICKSTART[0]),
        "--server",
        comfyui.url,
        "--output-dir",
        str(out),
        "--timeout",
        "540",
        "--no-progress",
        timeout=580,
    )
    assert proc.returncode == 0, proc.stderr + "\n" + comfyui.log_tail()
    prompt_id = proc.stdout.split("queued prompt ")[1].split()[0]
    history = comfyui.get_json(f"/history/{prompt_id}")[prompt_id]
    entries = [
        e
        for ui in history["outputs"].values()
        for v in ui.values()
        if isinstance(v, list)
        for e in v
        if isinstance(e, dict) and str(e.get("filename", "")).endswith(".mp4")
    ]
    assert entries, f"no mp4 among the outputs: {history['outputs']}"
    query = urllib.parse.urlencode({k: entries[0].get(k, "") for k in ("filename", "subfolder", "type")})
    with urllib.request.urlopen(f"{comfyui.url}/view?{query}", timeout=60) as resp:
        head = resp.read(64)
    assert b"ftyp" in head  # an MP4 container
    assert list(out.rglob("*.mp4"))


@pytest.mark.skipif(not QUICKSTART, reason="no quickstart workflow yet")
@pytest.mark.skipif(not BUNDLED_MODEL.is_file(), reason=f"the quickstart needs the bundled model ({BUNDLED_MODEL})")
def test_interrupt_leaves_a_playable_partial_file(comfyui):
    """POST /interrupt after the first block: the run stops, and the mp4 Block Denoise was streaming is kept,
    renamed from `.partial.mp4` to its final name, playable, holding the blocks finished so far."""
    websocket = pytest.importorskip("websocket")
    av = pytest.importorskip("av")
    workflow = json.loads(QUICKSTART[0].read_text())
    if "nodes" in workflow:
        pytest.skip("the quickstart workflow is UI format; this test posts API format directly")
    denoise = next(n for n in workflow.values() if n["class_type"] == "InferixBlockDenoise")
    denoise["inputs"].update(num_blocks=400, seconds=0.0)  # long enough that it cannot finish first
    settings = next(n for n in workflow.values() if n["class_type"] == "InferixStreamSettings")
    settings["inputs"]["filename_prefix"] = "inferix/interrupted"
    folder = comfyui.output_dir / "inferix"
    client_id = uuid.uuid4().hex
    ws = websocket.create_connection(f"{comfyui.url.replace('http', 'ws', 1)}/ws?clientId={client_id}", timeout=120)
    try:
        status, body = comfyui.post_json("/prompt", {"prompt": workflow, "client_id": client_id})
        assert status == 200, body
        prompt_id = body["prompt_id"]
        blocks_seen = 0
        deadline = time.monotonic() + 540
        while time.monotonic() < deadline:
            raw = ws.recv()
            if not isinstance(raw, str):
                continue
            msg = json.loads(raw)
            data = msg.get("data") or {}
            if msg["type"] == "inferix.block":  # a block is on disk before its event is sent
                blocks_seen += 1
                if blocks_seen == 1:
                    assert list(folder.glob("interrupted_*.partial.mp4")), "no partial file while generating"
                    comfyui.post_json("/interrupt", {})
                continue
            if data.get("prompt_id") not in (None, prompt_id):
                continue
            if msg["type"] == "execution_interrupted":
                break
            if msg["type"] == "execution_error":
                pytest.fail(f"the run failed instead: {data.get('exception_message')}")
            assert msg["type"] != "execution_success", "the run finished before the interrupt took effect"
        else:
            pytest.fail("no execution_interrupted message")
    finally:
        ws.close()
    # ComfyUI sends execution_interrupted before it writes the history entry: wait for the entry
    deadline = time.monotonic() + 30
    while prompt_id not in (entries := comfyui.get_json(f"/history/{prompt_id}")) and time.monotonic() < deadline:
        time.sleep(0.2)
    history = entries[prompt_id]
    assert any(event == "execution_interrupted" for event, _ in history["status"]["messages"])
    assert not list(folder.glob("*.partial*")), "a half-written file was left under a partial name"
    [kept] = folder.glob("interrupted_*.mp4")
    with av.open(str(kept)) as container:
        num_frames = sum(1 for _ in container.decode(video=0))
    assert 0 < num_frames < 400 * 12, num_frames  # some whole blocks, not the full run
    assert (num_frames - 1) % 4 == 0  # whole latent frames: 1 + 4k pixel frames
