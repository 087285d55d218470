"""The one place the node pack touches ComfyUI's runtime, each piece with a headless fallback.

Progress bars (comfy.utils.ProgressBar with preview images, else the headless executor's hook from
`inferix_core.workflow.progress`, a tqdm bar), interrupts (comfy.model_management, else the executor's
process-wide flag), folders (folder_paths, else $INFERIX_OUTPUT_DIR /
$INFERIX_MODELS_DIR or `set_output_dir`) and websocket events (PromptServer.send_sync, else
registered listeners and a debug log line). Nothing here runs models or converts tensors.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferix_core.errors import MissingFileError
from inferix_core.workflow import progress as headless

log = logging.getLogger(__name__)

try:  # each ComfyUI module is optional; the pack must import without ComfyUI
    import folder_paths
except ImportError:
    folder_paths = None
try:
    import comfy.model_management as comfy_mm
    import comfy.utils as comfy_utils
except ImportError:
    comfy_mm = comfy_utils = None

BLOCK_EVENT = "inferix.block"
PREVIEW_MAX_SIZE = 512  # px, the longest side of a per-block preview image
BUNDLED = "bundled"
# folders we add to ComfyUI's model search paths when missing (name -> folder under models/)
EXTRA_MODEL_FOLDERS = {"inferix_metrics": "inferix_metrics", "vae_approx": "vae_approx"}

_state: dict[str, Any] = {"output_dir": None, "input_dir": None}
_listeners: list[Callable[[str, dict], None]] = []


def register_model_folders() -> None:
    """Add `models/inferix_metrics` and `models/vae_approx` to folder_paths if it does not know them."""
    if folder_paths is None:
        return
    for name, sub in EXTRA_MODEL_FOLDERS.items():
        if name not in folder_paths.folder_names_and_paths:
            path = os.path.join(folder_paths.models_dir, sub)
            folder_paths.folder_names_and_paths[name] = ([path], set(folder_paths.supported_pt_extensions))


# --- folders ---------------------------------------------------------------------------------------


def set_output_dir(path: str | os.PathLike[str] | None) -> None:
    """Headless: where output nodes write (overrides $INFERIX_OUTPUT_DIR); None restores the default."""
    _state["output_dir"] = None if path is None else str(path)


def output_dir() -> Path:
    """ComfyUI's output folder, else set_output_dir(), $INFERIX_OUTPUT_DIR, or ./output."""
    if folder_paths is not None:
        return Path(folder_paths.get_output_directory())
    return Path(_state["output_dir"] or os.environ.get("INFERIX_OUTPUT_DIR") or "output")


def set_input_dir(path: str | os.PathLike[str] | None) -> None:
    """Headless: the folder workflows read input files from (overrides $INFERIX_INPUT_DIR); None: the default."""
    _state["input_dir"] = None if path is None else str(path)


def input_dir() -> Path:
    """ComfyUI's input folder, else set_input_dir(), $INFERIX_INPUT_DIR, or ./input."""
    if folder_paths is not None:
        return Path(folder_paths.get_input_directory())
    return Path(_state["input_dir"] or os.environ.get("INFERIX_INPUT_DIR") or "input")


def temp_dir() -> Path:
    """ComfyUI's temp folder (served as type 'temp'), else `<output>/../temp` or the system temp dir."""
    if folder_paths is not None:
        return Path(folder_paths.get_temp_directory())
    base = Path(_state["output_dir"] or os.environ.get("INFERIX_OUTPUT_DIR") or tempfile.gettempdir())
    return base.parent / "temp" if base.name == "output" else base / "inferix_temp"


def model_choices(folder: str, *, bundled: bool = False) -> list[str]:
    """File names offered in a loader combo: folder_paths' list, else the files under $INFERIX_MODELS_DIR."""
    names: list[str] = []
    if folder_paths is not None:
        try:
            names = list(folder_paths.get_filename_list(folder))
        except KeyError:
            names = []
    elif os.environ.get("INFERIX_MODELS_DIR"):
        root = Path(os.environ["INFERIX_MODELS_DIR"], folder)
        if root.is_dir():
            names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return ([BUNDLED] if bundled else []) + names


def model_folder(folder: str, *, existing: bool = True) -> str | None:
    """The first existing directory of a model folder (e.g. 'inferix_metrics'), or None.

    `existing=False`: the folder where files belong even if it does not exist yet (ComfyUI's first path for
    it, else $INFERIX_MODELS_DIR/<folder>, else ./models/<folder>), so a message can say where to put them.
    """
    paths: list[str] = []
    if folder_paths is not None and folder in folder_paths.folder_names_and_paths:
        paths = list(folder_paths.get_folder_paths(folder))
    elif os.environ.get("INFERIX_MODELS_DIR"):
        paths = [os.path.join(os.environ["INFERIX_MODELS_DIR"], folder)]
    found = next((p for p in paths if os.path.isdir(p)), None)
    if found is not None or existing:
        return found
    return paths[0] if paths else os.path.join("models", folder)


def resolve_model_file(folder: str, name: str, *, bundled: bool = True) -> str:
    """Full path of `name` in model folder `folder` ('bundled' passes through); raises MissingFileError.

    `bundled`: whether this input offers the bundled choice (model parts do, LoRAs do not), for the hints.

    Inside ComfyUI the name comes from a workflow (anyone who can POST /prompt), and our nodes' own
    validate_inputs takes over ComfyUI's check of the combo's choices, so only files under ComfyUI's
    folders for `folder` are accepted: no absolute paths, no `..`. Headless, a name under
    $INFERIX_MODELS_DIR/<folder>/ is confined the same way, and any other name is taken as the path
    the CLI user typed.
    """
    if name == BUNDLED and bundled:
        return name
    or_bundled = f" (or '{BUNDLED}')" if bundled else ""
    choose = f", or choose '{BUNDLED}'" if bundled else ""
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise MissingFileError(f"model file name {str(name)[:80]!r} is not a file name; choose a file{choose}")
    if folder_paths is not None:
        try:
            roots = list(folder_paths.get_folder_paths(folder))
        except KeyError:
            roots = []
        try:
            found = folder_paths.get_full_path(folder, name)
        except KeyError:
            found = None
        for path in [found, *(os.path.join(root, name) for root in roots)]:
            if path and _inside(path, roots) and os.path.isfile(path):
                return os.path.abspath(path)
        raise MissingFileError(
            f"'{name}' is not a file in ComfyUI's '{folder}' model folder; only files under models/{folder}/"
            f"{or_bundled} can be loaded. Put the file there and pick it from the list."
        )
    candidates: list[str] = []
    if os.environ.get("INFERIX_MODELS_DIR"):
        root = os.path.join(os.environ["INFERIX_MODELS_DIR"], folder)
        path = os.path.join(root, name)
        if _inside(path, [root]):
            candidates.append(path)
    candidates.append(name)  # headless: an explicit path the CLI user gave
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise MissingFileError(
        f"'{name}' was not found in the '{folder}' model folder. Put the file in models/{folder}/ "
        f"(or $INFERIX_MODELS_DIR/{folder}/ when headless){choose}."
    )


def _inside(path: str, roots: list[str]) -> bool:
    """Whether `path`, normalised (not symlink-resolved: a link the admin put in a model folder is theirs), is under a root."""
    full = os.path.abspath(path)
    for root in roots:
        base = os.path.abspath(root)
        if os.path.commonpath([full, base]) == base and full != base:
            return True
    return False


# --- interrupts --------------------------------------------------------------------------------------


def request_interrupt() -> None:
    """Headless: ask the running node to stop at its next check (the CLI does this on Ctrl-C)."""
    headless.request_interrupt()


def check_interrupt() -> None:
    """Raise if the user asked to stop: ComfyUI's own exception inside ComfyUI, else GenerationInterruptedError."""
    if comfy_mm is not None:
        comfy_mm.throw_exception_if_processing_interrupted()
    else:
        headless.check_interrupt()


# --- progress ------------------------------------------------------------------------------------------


class Progress:
    """A progress bar for one node run: ComfyUI's (with preview images), else the executor's hook."""

    def __init__(self, total: int, node_id: str | None = None, desc: str = "inferix"):
        self.total = total
        self.value = 0
        self._bar = comfy_utils.ProgressBar(total, node_id=node_id) if comfy_utils is not None else None
        self._hook = None if self._bar is not None else headless.current_progress()
        if self._hook is not None:
            self._hook.start(total, desc)

    def update(self, value: int, preview: Any = None) -> None:
        """Set progress to `value` of `total`; `preview` is a PIL image shown on the node."""
        if self._bar is not None:
            shown = ("JPEG", preview, PREVIEW_MAX_SIZE) if preview is not None else None
            self._bar.update_absolute(value, self.total, shown)
        elif self._hook is not None:
            self._hook.update(value - self.value, preview)
        self.value = value

    def close(self) -> None:
        """Finish the headless bar (ComfyUI's needs no closing)."""
        if self._hook is not None:
            self._hook.close()


# --- websocket events ------------------------------------------------------------------------------------


def add_event_listener(listener: Callable[[str, dict], None]) -> Callable[[], None]:
    """Headless: receive every event a node sends; returns a function that removes the listener."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def send_event(event: str, data: dict) -> None:
    """Send `event` to the ComfyUI front end (all clients), and to headless listeners."""
    try:
        from server import PromptServer

        PromptServer.instance.send_sync(event, data)
    except (ImportError, AttributeError):
        log.debug("%s %s", event, data)
    for listener in list(_listeners):
        listener(event, data)


def save_preview(image: Any, prefix: str) -> dict[str, str]:
    """Save a small JPEG of a PIL image in the temp folder; returns {filename, subfolder, type} for /view."""
    folder = temp_dir() / "inferix"
    folder.mkdir(parents=True, exist_ok=True)
    image = image.copy()
    image.thumbnail((PREVIEW_MAX_SIZE, PREVIEW_MAX_SIZE))
    name = f"{prefix}.jpg"
    tmp = folder / f".{name}.tmp"
    image.save(tmp, format="JPEG", quality=85)
    os.replace(tmp, folder / name)  # previews are ours and replaced per block; outputs never are
    return {"filename": name, "subfolder": "inferix", "type": "temp"}


# --- generation hooks ------------------------------------------------------------------------------------


class BlockHooks:
    """The core's generation hooks, reported to ComfyUI: progress with a preview, `inferix.block`, interrupts.

    Args:
        node_id: ComfyUI id of the node running the generation (None headless).
        num_blocks: blocks the run will produce (the progress bar's length).
    """

    def __init__(self, node_id: str | None, num_blocks: int):
        self.node_id = node_id
        self.num_blocks = num_blocks
        self.run_id = f"{node_id or 'headless'}_{uuid.uuid4().hex[:8]}"
        self.done = 0  # blocks finished in this run
        self.progress = Progress(num_blocks, node_id=node_id, desc="blocks")

    def on_start(self, num_blocks: int) -> None:
        """Called once before the first block."""
        self.num_blocks = self.progress.total = num_blocks
        self.done = 0

    def check_interrupt(self) -> None:
        """Called by the pipeline between denoising steps."""
        check_interrupt()

    def on_block_end(
        self, index: int, frames: Any, timings: dict[str, float] | None = None, memory: dict[str, Any] | None = None
    ) -> None:
        """One clean block is done: move the bar, show its last frame, tell the front end.

        Args:
            index: the block's index in the world, from 0 (a continued world's first new block is past 0).
            frames: the block's decoded frames, uint8 [T, H, W, 3] (numpy or torch), or None.
            timings: seconds per phase of this block (denoise, context, decode, ...).
            memory: KV-cache usage (bytes on GPU / host) when the cache reports it.
        """
        preview = _last_frame_image(frames)
        saved = save_preview(preview, f"{self.run_id}_block") if preview is not None else None
        # `index` counts the world's blocks (a continued world starts past 0); progress counts this run's
        self.done += 1
        self.progress.update(self.done, preview)
        # the core reports KV-cache bytes among the timings (kv_gpu_bytes, kv_host_bytes); the panel reads memory
        timings = dict(timings or {})
        memory = {**{k: timings.pop(k) for k in list(timings) if k.startswith("kv_")}, **(memory or {})}
        send_event(
            BLOCK_EVENT,
            {
                "node": self.node_id,
                "run": self.run_id,
                "block": self.done - 1,  # of this run, as num_blocks
                "num_blocks": self.num_blocks,
                "world_block": index,  # of the world (past a continued world's earlier blocks)
                "timings": timings,
                "memory": memory,
                "preview": saved,
            },
        )
        check_interrupt()

    def close(self) -> None:
        self.progress.close()


def _last_frame_image(frames: Any) -> Any:
    """PIL image of the last frame of a uint8 [T, H, W, 3] block (None when there are no frames)."""
    if frames is None or len(frames) == 0:
        return None
    from PIL import Image

    last = frames[-1]
    if hasattr(last, "detach"):
        last = last.detach().cpu().numpy()
    return Image.fromarray(last)


# --- memory and devices ------------------------------------------------------------------------------------
# Inside ComfyUI our world models are registered with comfy.model_management like its own models: wrapped in
# a ModelPatcher (weights only, no patches), loaded with `load_models_gpu` before each run, so ComfyUI frees
# other models to make room for ours and can evict ours (detach → `.to(offload_device)`) when another model
# needs the memory. The device is ComfyUI's (`get_torch_device`: --cpu, --cuda-device, mps, xpu ...).
# Headless every function here is a no-op or the registry's own choice.

_PATCHER_ATTR = "_inferix_model_patcher"  # on the transformer: the patcher that ComfyUI tracks (weakly)


def torch_device() -> Any:
    """ComfyUI's compute device (honours --cpu, --cuda-device, mps ...), else the registry's 'auto'."""
    if comfy_mm is not None:
        return comfy_mm.get_torch_device()
    from inferix_core.models.registry import resolve_device

    return resolve_device("auto")


def device_choice(choice: str) -> str:
    """A loader's `device` widget as a device string: 'auto' is ComfyUI's device inside ComfyUI."""
    if choice == "auto" and comfy_mm is not None:
        return str(comfy_mm.get_torch_device())
    return choice


def make_room(num_bytes: float, device: Any) -> None:
    """Ask ComfyUI to unload models until `num_bytes` fit on `device` (before we allocate them)."""
    import torch

    if comfy_mm is None or num_bytes <= 0:  # headless: nothing else shares the device through us
        return
    device = torch.device(device)
    if device.type == "cpu":
        return
    unloaded = comfy_mm.free_memory(num_bytes * 1.1 + comfy_mm.minimum_inference_memory(), device)
    names = [type(getattr(m.model, "model", m.model)).__name__ for m in unloaded or [] if m.model is not None]
    log.info(
        "asked ComfyUI for %.2f GiB on %s: %d model(s) unloaded%s",
        num_bytes / 2**30,
        device,
        len(unloaded or []),
        f" ({', '.join(names)})" if names else "",
    )


def estimate_weights_bytes(patcher: Any, dtype: Any) -> float:
    """Bytes of a core MODEL's diffusion weights once copied in `dtype`."""
    import torch

    inner = patcher.model.diffusion_model
    return float(sum(p.numel() for p in inner.parameters()) * torch.empty((), dtype=dtype).element_size())


def estimate_file_bytes(*paths: str | None) -> float:
    """Bytes the weight files will take once loaded (their size on disk; 0 for 'bundled' and folders)."""
    return float(sum(os.path.getsize(p) for p in paths if p and p != BUNDLED and os.path.isfile(p)))


def _modules_of(world_model: Any) -> list[Any]:
    """The torch modules a world model holds (transformer, VAE, preview decoder, text encoder), once each."""
    import torch

    found: dict[int, Any] = {}
    for part in (world_model.transformer, world_model.vae, world_model.preview_decoder, world_model.text_encoder):
        for obj in (part, getattr(part, "encoder", None), getattr(getattr(part, "encoder", None), "model", None)):
            if isinstance(obj, torch.nn.Module):
                found.setdefault(id(obj), obj)
                break
            model = getattr(obj, "model", None)
            if isinstance(model, torch.nn.Module):
                found.setdefault(id(model), model)
                break
    return list(found.values())


# canonical sizes of the released Wan transformers, by (dim, layers); others are named by their parameter count
_WAN_SIZES = {(1536, 30): "1.3B", (5120, 40): "14B", (3072, 30): "5B"}


def model_label(world_model: Any) -> str:
    """'Inferix self_forcing 1.3B': the family and size, as ComfyUI's model list and memory log show it."""
    config = world_model.config
    size = _WAN_SIZES.get((getattr(config, "dim", 0), getattr(config, "num_layers", 0)))
    if size is None:
        count = config.num_parameters()
        size = f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"
    family = f"{world_model.family}_{world_model.variant}" if world_model.variant else world_model.family
    return f"Inferix {family} {size}"


def model_container(world_model: Any) -> Any:
    """The world model's torch modules in one ModuleList whose class is named by `model_label` (ComfyUI shows
    a model by its class name: a plain ModuleList would be listed as "ModuleList")."""
    import torch

    named = type(model_label(world_model), (torch.nn.ModuleList,), {"__module__": __name__})
    return named(_modules_of(world_model))


def register_world_model(world_model: Any) -> Any:
    """Make a loaded world model one of ComfyUI's models (evictable, loaded through load_models_gpu).

    The patcher hangs off the transformer (ComfyUI keeps only a weak reference to it), so it lives as long
    as the model; `dataclasses.replace` copies of the WorldModel share it. Returns the world model.
    """
    if comfy_mm is None:
        return world_model
    import comfy.model_patcher

    container = model_container(world_model)
    size = comfy_mm.module_size(container)
    # the weights are already on the load device: say so, or ComfyUI would free room for a second copy
    container.device = world_model.device
    container.model_loaded_weight_memory = size
    patcher = comfy.model_patcher.ModelPatcher(
        container, load_device=world_model.device, offload_device=comfy_mm.unet_offload_device(), size=size
    )
    object.__setattr__(world_model.transformer, _PATCHER_ATTR, patcher)  # a plain attribute, not a submodule
    ensure_loaded(world_model)
    return world_model


def model_patcher(world_model: Any) -> Any:
    """The ModelPatcher ComfyUI tracks for this world model (None headless or unregistered)."""
    return getattr(getattr(world_model, "transformer", None), _PATCHER_ATTR, None)


def ensure_loaded(world_model: Any, extra_bytes: float = 0) -> None:
    """Before a run: ComfyUI loads the world model onto its device (moving it back if it was evicted),
    unloading other models until it and `extra_bytes` (KV cache, activations) fit."""
    patcher = model_patcher(world_model)
    if patcher is None or comfy_mm is None:
        return
    # with make_room's margins (× 1.1 + ComfyUI's minimum inference memory): ComfyUI frees just what it is asked
    # for, partly unloading another model when that is enough, and the allocator then needs more than the plan's
    # sum (tests/integration/test_gpu_memory.py on an H100, ComfyUI v0.3.64: an OOM 292 MiB short in the VAE
    # decode, the text encoder partly loaded beside us, with the plain sum)
    extra = extra_bytes * 1.1 + comfy_mm.minimum_inference_memory() if extra_bytes > 0 else 0
    comfy_mm.load_models_gpu([patcher], memory_required=int(extra), force_full_load=True)
