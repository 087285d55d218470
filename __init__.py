"""ComfyUI entry point of the Inferix node pack (this folder sits in ComfyUI/custom_nodes/).

ComfyUI imports this file as a package and reads NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
and WEB_DIRECTORY. The nodes live in `nodes/`, imported relatively, never as a top-level `nodes`
(that is ComfyUI's own module). The engine, `inferix_core`, is imported absolutely: from the pip
install when there is one, else from this folder, which is then appended (not prepended) to sys.path.
Imported as a plain module (this folder on sys.path, no ComfyUI), `nodes/` is loaded as `inferix_nodes`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if importlib.util.find_spec("inferix_core") is None:
    sys.path.append(_HERE)  # appended so this folder's nodes/ can never shadow ComfyUI's nodes.py

if __package__:
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
else:  # not imported as a package: give nodes/ its installed name instead of the clashing `nodes`
    if "inferix_nodes" not in sys.modules and importlib.util.find_spec("inferix_nodes") is None:
        _spec = importlib.util.spec_from_file_location(
            "inferix_nodes",
            os.path.join(_HERE, "nodes", "__init__.py"),
            submodule_search_locations=[os.path.join(_HERE, "nodes")],
        )
        _module = importlib.util.module_from_spec(_spec)
        sys.modules["inferix_nodes"] = _module
        _spec.loader.exec_module(_module)
    _nodes = importlib.import_module("inferix_nodes")
    NODE_CLASS_MAPPINGS = _nodes.NODE_CLASS_MAPPINGS
    NODE_DISPLAY_NAME_MAPPINGS = _nodes.NODE_DISPLAY_NAME_MAPPINGS

WEB_DIRECTORY = "./web_ext"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
