"""The pack's root `__init__.py` as ComfyUI loads it: no `sys.path` edit, the engine found without a pip install,
and `comfy_entrypoint` (ComfyUI's V3 loader) giving the same nodes as NODE_CLASS_MAPPINGS (issue #43)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import asyncio, importlib.util, json, os, sys
# as on a machine where the pack is only a folder in custom_nodes/: the editable install's finder is gone, and
# so is any path entry that holds an inferix_core (PYTHONPATH, an editable .pth)
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "inferix_core"))]
root = sys.argv[1]
path_before = list(sys.path)
assert importlib.util.find_spec("inferix_core") is None, "inferix_core still importable without the pack"
spec = importlib.util.spec_from_file_location("inferix_pack", root + "/__init__.py", submodule_search_locations=[root])
pack = importlib.util.module_from_spec(spec)
sys.modules["inferix_pack"] = pack
spec.loader.exec_module(pack)
ext = asyncio.run(pack.comfy_entrypoint())
listed = asyncio.run(ext.get_node_list())
print(json.dumps({
    "path_unchanged": sys.path == path_before,
    "core_file": sys.modules["inferix_core"].__file__,
    "top_level_nodes": "nodes" in sys.modules,
    "mapped": sorted(pack.NODE_CLASS_MAPPINGS),
    "listed": sorted(n.GET_SCHEMA().node_id for n in listed),
}))
"""


def test_pack_loads_without_sys_path_edits_and_has_a_v3_entrypoint(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["path_unchanged"], "the pack edited sys.path"
    assert Path(got["core_file"]).resolve() == (ROOT / "inferix_core" / "__init__.py").resolve()
    assert not got["top_level_nodes"], "a top-level `nodes` module would shadow ComfyUI's nodes.py"
    assert got["listed"] == got["mapped"] and len(got["mapped"]) >= 10
