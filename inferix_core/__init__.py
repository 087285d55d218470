"""Inferix core: a framework-free block-diffusion world-model inference engine.

Layers, imported in one direction only: tensors -> modules -> models -> cache -> pipeline -> sinks.
Nothing in this package imports ComfyUI (`comfy`, `folder_paths`, `server`).
"""

__version__ = "0.1.0"
