"""InferixSaveWorldState and InferixLoadWorldState: a world written to / read from a file, between runs.

Block Denoise outputs the world after its last block (`world_state`, only captured when that output is
linked) and takes one to continue (`world_state` input). These nodes carry it to and from a file: saved
under ComfyUI's output folder with a prefix and a number, never overwriting, and loaded only from files
inside the output or input folder (the name comes from a workflow, i.e. from anyone who can queue one).
The state itself is `inferix_core.engine.world_state`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from inferix_core.errors import ConfigError, MissingFileError

from . import comfy_runtime as rt
from . import types
from .compat import io
from .stream_settings import check_prefix, output_entry, split_prefix

EXT = "safetensors"
ROOTS = ("output", "input")  # the folders a world state may be loaded from, as "[output]" / "[input]" tags
MAX_CHOICES = 500  # files listed in the combo (newest first); any other file in the folders can be typed
NONE = "none"


def _root(tag: str) -> Path:
    return rt.output_dir() if tag == "output" else rt.input_dir()


def world_files() -> list[str]:
    """'sub/name.safetensors [output]' for world-state candidates in the output and input folders, newest first."""
    found: list[tuple[float, str]] = []
    for tag in ROOTS:
        root = _root(tag)
        if not root.is_dir():
            continue
        for path in root.rglob(f"*.{EXT}"):
            if path.is_file() and ".partial" not in path.name:
                found.append((path.stat().st_mtime, f"{path.relative_to(root).as_posix()} [{tag}]"))
    return [name for _, name in sorted(found, reverse=True)[:MAX_CHOICES]]


def resolve_world_file(choice: str) -> Path:
    """The file a 'name [output]' / 'name [input]' choice names, refusing anything outside that folder.

    Absolute names, `..` and symlinks that lead out of the folder are refused (the path is resolved,
    symlinks included, and must stay inside the resolved folder).
    """
    text = str(choice).strip()
    tag = "output"
    for t in ROOTS:
        if text.endswith(f" [{t}]"):
            text, tag = text[: -len(f" [{t}]")], t
            break
    if not text or "\x00" in text or text == NONE:
        raise MissingFileError(
            "no world state chosen; save one with Inferix Save World State and pick it from the list"
        )
    rel = Path(text)
    if rel.is_absolute() or text.startswith(("\\", "/")) or ":" in text or ".." in rel.parts:
        raise ConfigError(
            f"world state '{text}' must be a file inside ComfyUI's {tag} folder (no absolute paths or ..)"
        )
    root = _root(tag).resolve()
    path = (root / rel).resolve()
    if root not in path.parents:
        raise ConfigError(f"world state '{text}' leads outside ComfyUI's {tag} folder; only files inside it load")
    if not path.is_file():
        raise MissingFileError(f"world state '{text}' is not a file in ComfyUI's {tag} folder")
    return path


class InferixSaveWorldState(io.ComfyNode):
    """Writes a world (Block Denoise's world_state output) to the output folder."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixSaveWorldState",
            display_name="Inferix Save World State",
            category=f"{types.CATEGORY}/world",
            description="Save the world after Block Denoise's last block (its KV cache, prompt, noise and decoder "
            "cache) to a .safetensors file in the output folder. Load World State continues it later, "
            "exactly where it stopped.",
            is_output_node=True,
            inputs=[
                types.WorldState.Input("world_state", tooltip="The world_state output of Inferix Block Denoise."),
                io.String.Input(
                    "filename_prefix",
                    default="inferix/world",
                    tooltip="File name prefix under the output folder; a number is appended (world_00001."
                    "safetensors). Subfolders are allowed. Existing files are never overwritten.",
                ),
            ],
            outputs=[io.String.Output("path", tooltip="The file written, relative to the output folder.")],
        )

    @classmethod
    def validate_inputs(cls, filename_prefix: str | None = None) -> bool | str:
        return check_prefix(filename_prefix)

    @classmethod
    def execute(cls, world_state: Any, filename_prefix: str) -> io.NodeOutput:
        from inferix_core.engine.world_state import write_world_state
        from inferix_core.sinks.paths import unique_path

        if world_state is None:
            raise ConfigError("no world state: connect Inferix Block Denoise's world_state output")
        folder, prefix = split_prefix(filename_prefix)
        path = write_world_state(unique_path(folder, prefix, EXT), world_state)
        rel = path.resolve().relative_to(rt.output_dir().resolve()).as_posix()
        text = f"saved {world_state.describe()}\nto {rel} [output]"
        ui: dict[str, Any] = {"text": [text]}
        entry = output_entry(path)
        if entry is not None:
            ui["world_states"] = [entry]
        return io.NodeOutput(f"{rel} [output]", ui=ui)


class InferixLoadWorldState(io.ComfyNode):
    """Reads a saved world from the output or input folder, for Block Denoise's world_state input."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixLoadWorldState",
            display_name="Inferix Load World State",
            category=f"{types.CATEGORY}/world",
            description="Load a world saved by Save World State; connect it to Block Denoise's world_state input "
            "to continue it. Block Denoise needs the same model, size, steps and KV cache settings, and says "
            "which one differs.",
            inputs=[
                io.Combo.Input(
                    "world_file",
                    options=world_files() or [NONE],
                    tooltip="A world state in ComfyUI's output ([output]) or input ([input]) folder, newest first.",
                ),
            ],
            outputs=[types.WorldState.Output("world_state", tooltip="For Inferix Block Denoise's world_state input.")],
        )

    @classmethod
    def validate_inputs(cls, world_file: str | None = None) -> bool | str:
        if world_file is None:
            return True
        try:
            resolve_world_file(world_file)
        except (ConfigError, MissingFileError) as exc:
            return str(exc)
        return True

    @classmethod
    def fingerprint_inputs(cls, world_file: str) -> str:
        """Re-read when the file changes (a new save under a reused name cannot happen, but a copy can)."""
        try:
            st = os.stat(resolve_world_file(world_file))
        except (ConfigError, MissingFileError, OSError):
            return world_file
        return f"{world_file}:{st.st_size}:{st.st_mtime_ns}"

    @classmethod
    def execute(cls, world_file: str) -> io.NodeOutput:
        from inferix_core.engine.world_state import read_world_state

        world = read_world_state(resolve_world_file(world_file))
        return io.NodeOutput(world, ui={"text": [world.describe()]})
