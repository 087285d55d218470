# ruff: noqa: N802 - the V1 node interface names these methods in capitals
"""Tiny node classes with the V1 interface, standing in for the node pack in workflow tests.

They do arithmetic on ints and write a text file, so a whole workflow runs in milliseconds.
`CALLS` records the order nodes ran in.
"""

from __future__ import annotations

import os
from pathlib import Path

from inferix_core.workflow import check_interrupt, current_progress

CALLS: list[str] = []


class Number:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 1, "min": 0, "max": 100})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "make"

    def make(self, value):
        CALLS.append(f"Number({value})")
        return (value,)


class Seeded:
    """Has a seed (a control_after_generate widget in the editor) and a combo, like a sampler."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "x": ("INT", {"forceInput": True}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**32 - 1}),
                "mode": (["add", "mul"], {"default": "add"}),
                "scale": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 10.0}),
            },
            "optional": {"bias": ("INT", {"default": 0, "min": -5, "max": 5})},
        }

    RETURN_TYPES = ("INT",)
    FUNCTION = "apply"

    def apply(self, x, seed, mode, scale, bias=0):
        CALLS.append(f"Seeded({x},{seed},{mode},{scale},{bias})")
        progress = current_progress()
        progress.start(3, "blocks")
        for _ in range(3):
            check_interrupt()
            progress.update(1)
        out = x + seed if mode == "add" else x * seed
        return (int(out * scale) + bias,)


class Add:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT", {"forceInput": True}), "b": ("INT", {"forceInput": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "add"

    def add(self, a, b):
        CALLS.append(f"Add({a},{b})")
        return (a + b,)


class Text:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": ""})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "make"

    def make(self, text):
        CALLS.append(f"Text({text})")
        return (text,)


class SaveText:
    """An output node: writes its input to a file and reports it in `ui` like SaveImage."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"value": ("*", {}), "prefix": ("STRING", {"default": "out"})},
            "hidden": {"unique_id": ("UNIQUE_ID",)},
        }  # V3-shim style

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True

    def save(self, value, prefix, unique_id=None):
        CALLS.append(f"SaveText({value})")
        out_dir = Path(os.environ["INFERIX_OUTPUT_DIR"])
        name = f"{prefix}_{unique_id}.txt"
        (out_dir / name).write_text(str(value))
        return {"ui": {"files": [{"filename": name, "subfolder": "", "type": "output"}]}, "result": ()}


class Picky:
    """Has VALIDATE_INPUTS that refuses odd numbers."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"n": ("INT", {"default": 2, "min": 0, "max": 10})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "make"

    @classmethod
    def VALIDATE_INPUTS(cls, n):
        return True if n % 2 == 0 else f"n must be even, got {n}"

    def make(self, n):
        return (n,)


class Boom:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT", {"forceInput": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "explode"

    def explode(self, x):
        raise RuntimeError("kaboom")


class Interrupter:
    """Requests an interrupt, as Ctrl-C would, then checks for it like a block loop."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT", {"forceInput": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, x):
        from inferix_core.workflow import request_interrupt

        request_interrupt()
        check_interrupt()
        return (x,)


class Latent:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "make"

    def make(self):
        return ({"samples": None},)


NODE_CLASS_MAPPINGS = {
    "Test_Number": Number,
    "Test_Seeded": Seeded,
    "Test_Add": Add,
    "Test_Text": Text,
    "Test_SaveText": SaveText,
    "Test_Picky": Picky,
    "Test_Boom": Boom,
    "Test_Interrupter": Interrupter,
    "Test_Latent": Latent,
}
