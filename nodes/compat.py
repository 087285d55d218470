"""Pick the node API: ComfyUI's V3 `comfy_api.latest` when importable, else our V1-compatible shim.

Node modules import `io` and `ComfyExtension` from here and nothing else from ComfyUI. In a new
ComfyUI the classes are real `io.ComfyNode`s (ComfyUI derives the V1 attributes itself); in an old
ComfyUI or headless (`inferix run`, tests) they are shim classes whose V1 attributes are plain class
attributes. This module does not touch progress, interrupts or folders: see `comfy_runtime`.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

try:
    from comfy_api.latest import ComfyExtension, io

    HAVE_COMFY_API = True
except ImportError as exc:  # headless, or a ComfyUI older than the V3 API
    log.debug("comfy_api.latest not importable (%s); using the V1-compatible shim", exc)
    from . import io_shim as io
    from .io_shim import ComfyExtension

    HAVE_COMFY_API = False

__all__ = ["HAVE_COMFY_API", "ComfyExtension", "io"]
