"""Lazy tensor sources over weight files: safetensors (one file or a diffusers shard index) and torch zips.

A source lists keys and shapes without reading data, and hands out one tensor at a time, so a loader
can convert a model tensor by tensor. Torch files are opened with `weights_only=True`: pickled code
is never executed. This module knows nothing about Wan key names.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch

from ...errors import CheckpointLayoutError, MissingFileError

logger = logging.getLogger(__name__)


class TensorSource(Protocol):
    file_format: str
    container: str | None
    metadata: Mapping[str, str]

    def keys(self) -> list[str]: ...
    def shape(self, key: str) -> Sequence[int]: ...
    def get(self, key: str) -> torch.Tensor: ...


class SafetensorsSource:
    """One or more safetensors files read through `safe_open` (memory-mapped, tensor by tensor)."""

    file_format = "safetensors"
    container = None

    def __init__(self, files: Sequence[Path]):
        from safetensors import safe_open

        self._handles = []
        self._where: dict[str, object] = {}
        self.metadata: dict[str, str] = {}
        for f in files:
            try:
                h = safe_open(str(f), framework="pt", device="cpu")
            except Exception as e:  # safetensors raises its own SafetensorError (or OSError)
                raise CheckpointLayoutError(
                    f"'{f.name}' is not a readable safetensors file ({e}); it may be truncated or corrupt "
                    f"(compare its size with the download) or not a safetensors file at all."
                ) from None
            self._handles.append(h)
            self.metadata.update(h.metadata() or {})
            for k in h.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                self._where[k] = h

    def keys(self) -> list[str]:
        return list(self._where)

    def shape(self, key: str) -> Sequence[int]:
        return self._where[key].get_slice(key).get_shape()

    def get(self, key: str) -> torch.Tensor:
        return self._where[key].get_tensor(key)


class DictSource:
    """A state dict from `torch.load(..., mmap=True)`: its tensors are views of the mapped file."""

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor],
        file_format: str,
        container: str | None,
        top_level_keys: Sequence[str] = (),
    ):
        self._tensors = tensors
        self.file_format = file_format
        self.container = container
        self.top_level_keys = tuple(top_level_keys)  # a training checkpoint's dicts: generator, generator_ema, …
        self.metadata: dict[str, str] = {}

    def keys(self) -> list[str]:
        return list(self._tensors)

    def shape(self, key: str) -> Sequence[int]:
        return tuple(self._tensors[key].shape)

    def get(self, key: str) -> torch.Tensor:
        return self._tensors[key]


def _flatten(obj: Mapping, prefix: str = "") -> dict[str, torch.Tensor]:
    """Tensors of a nested dict under dotted names; non-tensor leaves (step counters, configs) are skipped."""
    out: dict[str, torch.Tensor] = {}
    for k, v in obj.items():
        if isinstance(v, torch.Tensor):
            out[prefix + str(k)] = v
        elif isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
    return out


def _load_torch(path: Path, containers: Sequence[str]) -> DictSource:
    """torch.load with weights_only and mmap; pick the first container present (`generator_ema`, …)."""
    file_format = "pt"
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap can only be used" not in str(e):
                raise
            # Legacy (pre-1.6, non-zip) serialisation can't be memory-mapped: this needs a full copy in RAM.
            logger.warning("'%s' uses the legacy torch format; loading it without mmap (needs its size in RAM)",
                           path.name)  # fmt: skip
            file_format = "pt-legacy"
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        raise CheckpointLayoutError(
            f"'{path.name}' contains pickled Python objects"
            + (f" ({found.group(1)})" if found else "")
            + " that would have to be executed to load it; we only load tensors and never run pickled code. "
            "Re-save just the state dict (a dict of tensors), or convert the file to safetensors."
        ) from None
    except Exception as e:  # torch raises many types for damaged archives
        raise CheckpointLayoutError(
            f"'{path.name}' could not be read as a torch checkpoint ({str(e).splitlines()[0]}); it is "
            f"probably truncated or corrupt (compare its size with the download)."
        ) from None
    if not isinstance(obj, Mapping):
        raise CheckpointLayoutError(f"'{path.name}' holds a {type(obj).__name__}, not a dict of tensors.")
    top = tuple(str(k) for k in obj)
    for name in containers:
        inner = obj.get(name)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
            return DictSource(_flatten(inner), file_format, name, top)
    return DictSource(_flatten(obj), file_format, None, top)


def _shard_path(folder: Path, name: object, index: Path) -> Path:
    """One shard named by an index, refused unless it is a file name inside the index's own folder."""
    shard = Path(str(name))
    inside = folder.resolve()
    if shard.is_absolute() or ".." in shard.parts or inside not in (folder / shard).resolve().parents:
        raise CheckpointLayoutError(
            f"'{index.name}' names the shard '{name}' outside its folder; a shard index may only list files "
            f"in '{folder}' (fix or re-download the index)."
        )
    return folder / shard


def _diffusers_shards(folder: Path) -> list[Path]:
    """Safetensors files of a diffusers transformer folder: the shard index if there is one.

    A pipeline root (it has `model_index.json`) stands for its `transformer/` subfolder.
    """
    if (folder / "model_index.json").is_file():
        if not (folder / "transformer").is_dir():
            raise MissingFileError(
                f"'{folder}' is a diffusers pipeline (model_index.json) without a transformer/ subfolder; "
                "download its transformer too, or point at the transformer weights."
            )
        logger.info("'%s' is a diffusers pipeline root; using its transformer/ subfolder", folder.name)
        folder = folder / "transformer"
    indices = sorted(folder.glob("*.safetensors.index.json"))
    if indices:
        try:
            weight_map = json.loads(indices[0].read_text()).get("weight_map", {})
        except (ValueError, AttributeError, UnicodeDecodeError):
            raise CheckpointLayoutError(f"'{indices[0].name}' is not a JSON shard index with a weight_map") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointLayoutError(f"'{indices[0].name}': weight_map must map tensor names to file names")
        shards = []
        for name in sorted(set(weight_map.values())):
            shard = folder / name
            if Path(name).is_absolute() or Path(name).name != name or name in (".", ".."):
                raise CheckpointLayoutError(
                    f"'{indices[0].name}' names shard '{name}' outside its folder; shards must be files beside the index"
                )
            shards.append(shard)
        return shards
    files = sorted(folder.glob("*.safetensors"))
    if len(files) != 1:
        raise MissingFileError(
            f"folder '{folder}' has {len(files)} .safetensors files and no *.safetensors.index.json; "
            "point at the weight file itself."
        )
    return files


def weights_folder(path: Path) -> Path:
    """The folder whose files describe `path`: a diffusers pipeline root's transformer/, else the folder itself
    (for a folder) or the file's parent."""
    folder = path if path.is_dir() else path.parent
    if path.is_dir() and (path / "model_index.json").is_file() and (path / "transformer").is_dir():
        return path / "transformer"
    return folder


def open_tensor_source(path: Path, containers: Sequence[str] = ()) -> TensorSource:
    """Open a weights file (or diffusers folder) by its content, not its extension."""
    if path.is_dir():
        return SafetensorsSource(_diffusers_shards(path))
    if path.name.endswith(".safetensors.index.json"):
        return SafetensorsSource(_diffusers_shards(path.parent))
    if not path.is_file():
        raise MissingFileError(f"weights file '{path}' does not exist")
    with path.open("rb") as f:
        head = f.read(9)
    if len(head) < 9:
        raise CheckpointLayoutError(f"'{path.name}' is {len(head)} bytes long: empty or truncated.")
    # safetensors first: its u64 header length may well start with byte 0x80, like a legacy pickle
    if head[8:9] == b"{" and head[:4] != b"PK\x03\x04":  # safetensors: u64 header length, then the JSON header
        return SafetensorsSource([path])
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":  # torch zip / legacy pickle
        if path.suffix == ".safetensors":  # torch.load would hand it to safetensors by its name
            from ...tensors import MISNAMED

            raise CheckpointLayoutError(MISNAMED.format(name=path.name, expected="transformer checkpoint"))
        return _load_torch(path, containers)
    raise CheckpointLayoutError(  # never quote the bytes: the file may be anything (a /prompt client chose it)
        f"'{path.name}' is neither a safetensors file nor a torch checkpoint; "
        "it may be corrupt, or a GGUF/other format we don't read."
    )
