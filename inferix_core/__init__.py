"""Inferix core: a framework-free block-diffusion world-model inference engine.

Layers, imported in one direction only: see docs/architecture.md ("Layers"), checked by
tests/test_import_graph.py.
Nothing in this package imports ComfyUI (`comfy`, `folder_paths`, `server`).
"""

__version__ = "0.1.0"
