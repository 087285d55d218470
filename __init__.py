"""ComfyUI entry point of the Inferix node pack (this folder sits in ComfyUI/custom_nodes/).

ComfyUI imports this file as a package and reads NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS and
WEB_DIRECTORY, or, through its V3 loader, `comfy_entrypoint` (the same nodes as one `ComfyExtension`). The nodes
live in `nodes/`, imported relatively, never as a top-level `nodes` (that is ComfyUI's own module). The engine,
`inferix_core`, is imported absolutely: from the pip install when there is one, else this folder's copy is loaded
by file under its own name; the import path is never edited, so nothing in this folder can shadow ComfyUI's modules.
Imported as a plain module (no ComfyUI), `nodes/` is loaded the same way as `inferix_nodes`.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_package(name: str, folder: str) -> None:
    """Load this folder's `folder/__init__.py` as the package `name`, unless a package of that name is importable."""
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    path = os.path.join(_HERE, folder)
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    logging.getLogger(__name__).info("%s loaded from %s (not pip-installed)", name, path)


_load_package("inferix_core", "inferix_core")

if __package__:
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, comfy_entrypoint
else:  # not imported as a package: give nodes/ its installed name instead of the clashing `nodes`
    _load_package("inferix_nodes", "nodes")
    _nodes = importlib.import_module("inferix_nodes")
    NODE_CLASS_MAPPINGS = _nodes.NODE_CLASS_MAPPINGS
    NODE_DISPLAY_NAME_MAPPINGS = _nodes.NODE_DISPLAY_NAME_MAPPINGS
    comfy_entrypoint = _nodes.comfy_entrypoint

WEB_DIRECTORY = "./web_ext"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "comfy_entrypoint"]
