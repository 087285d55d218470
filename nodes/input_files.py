"""Files a workflow may read by name: ComfyUI's input folder, or files the pack ships.

A name in a workflow comes from whoever can queue one (POST /prompt), so a node that reads a file by a
name typed into a widget takes it from here only: a name relative to the input folder (ComfyUI's, or
`inferix run --input-dir` headless), resolved with symlinks and required to stay inside that folder, or
one of the pack's bundled files named exactly. Absolute paths, `..` and links leading out are refused in
one line that names the input and how to fix it; the refused file is never opened, so nothing of it can
be echoed. docs/security.md lists every path-like input and its rule.
"""

from __future__ import annotations

from pathlib import Path

from inferix_core.errors import ConfigError, MissingFileError

from . import comfy_runtime as rt

PACK_ROOT = Path(__file__).resolve().parents[1]
INPUT_TAG = " [input]"  # ComfyUI's annotation for a file in the input folder ("name.json [input]")
MAX_CHOICES = 500  # files listed in a combo; any other file in the input folder can still be named


def input_folder_text() -> str:
    """How messages name the input folder: ComfyUI's, or the CLI's --input-dir with its path."""
    if rt.folder_paths is not None:
        return "ComfyUI's input folder"
    return f"the input folder ({rt.input_dir()}, set with inferix run --input-dir)"


def input_choices(suffixes: tuple[str, ...]) -> list[str]:
    """Names (relative, '/'-separated) of the input folder's files with one of `suffixes`, sorted."""
    root = rt.input_dir()
    if not root.is_dir():
        return []
    names = sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
    )
    return names[:MAX_CHOICES]


def bundled_files(folder: str, suffixes: tuple[str, ...]) -> list[str]:
    """The pack's files under `folder` (e.g. 'workflows/captions'), named relative to the pack."""
    base = PACK_ROOT / folder
    if not base.is_dir():
        return []
    return sorted(f"{folder}/{p.name}" for p in base.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def resolve_input_file(value: str, input_name: str, bundled: list[str]) -> Path:
    """The file `value` names: one of `bundled` (in the pack), else a file inside the input folder.

    Raises ConfigError (one line naming `input_name`) for an absolute path, `..`, or a link leading out
    of the folder, and MissingFileError for a name that is not a file there.
    """
    text = str(value).strip()
    if text.endswith(INPUT_TAG):
        text = text[: -len(INPUT_TAG)].strip()
    if text in bundled:
        return PACK_ROOT / text
    fix = f"put the file in {input_folder_text()} and give its name relative to that folder"
    if bundled:
        fix += f", or choose the bundled {bundled[0]}"
    if not text or "\x00" in text:
        raise ConfigError(f"{input_name} is empty; {fix}")
    rel = Path(text)
    if rel.is_absolute() or text.startswith(("/", "\\", "~")) or ":" in text or ".." in rel.parts:
        raise ConfigError(
            f"{input_name} '{text}' is outside the input folder (absolute paths and .. are refused); {fix}"
        )
    root = rt.input_dir().resolve()
    path = (root / rel).resolve()
    if root not in path.parents:
        raise ConfigError(f"{input_name} '{text}' leads outside the input folder (through a link); {fix}")
    if not path.is_file():
        raise MissingFileError(f"{input_name} '{text}' is not a file in {input_folder_text()}; {fix}")
    return path
