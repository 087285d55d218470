"""`inferix play [SOURCE]`: drive a world model live from the browser (keyboard → actions, prompt box → prompt).

Wires a LiveView (MJPEG out, input in) and an Mp4Sink to an InteractiveSession and runs it until the
page sends stop, `--max-blocks` is reached, or Ctrl-C. The mp4 is written to a partial file and renamed
when the session closes, so an interrupted session still leaves a playable file. The session holds
the semantics (block boundaries, re-cache); this module only loads, wires and reports.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import webbrowser
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import KVCacheConfig
from ..clients.session import InteractiveSession, SessionBlock
from ..controls import control_spec_of
from ..engine.image_world import DEFAULT_SIZE as IMAGE_MODEL_SIZE
from ..engine.image_world import start_image_role, takes_start_image
from ..engine.world_state import WorldState, read_world_state
from ..errors import ConfigError, InferixError, MissingFileError, WorkflowError
from ..models.memory import MemorySettings
from ..models.registry import WorldModel, load_world_model
from ..sinks import LiveView, Mp4Sink, unique_path
from ..sinks.live import DEFAULT_KEY_ACTIONS
from ..text.vocabulary import VocabularyPromptEncoder
from ..workflow.settings import cache_config, load_options, memory_settings, model_file
from .lora_option import add_lora_option
from .memory_args import add_family_arguments, add_memory_arguments, load_options_from_args, memory_settings_from_args

log = logging.getLogger(__name__)

# The page's generic key names → names world models use for them, most common first.
ACTION_SYNONYMS: dict[str, tuple[str, ...]] = {
    "forward": ("forward", "accelerate", "throttle", "up", "move_forward"),
    "backward": ("backward", "brake", "reverse", "back", "down", "move_backward"),
    "left": ("left", "steer_left", "turn_left", "move_left"),
    "right": ("right", "steer_right", "turn_right", "move_right"),
}
IDLE_KEY = "x"  # releases the controls: the model's "none" action
DEFAULT_SIZE = (832, 480)  # Wan 2.1 T2V; the bundled model brings its own


@dataclass
class PlaySetup:
    """What `inferix play` runs: the model and the settings a workflow (or the flags) chose."""

    world_model: WorldModel
    prompt: str = ""
    width: int | None = None
    height: int | None = None
    seed: int = 0
    cache: KVCacheConfig | None = None
    start_image: str | None = None  # image-started models (Matrix-Game 2.0): the start image file
    clip_vision: str | None = None  # and its CLIP vision file (clip_vision_h.safetensors)


@dataclass
class PlayResult:
    url: str
    output: Path | None  # the published mp4, None with --no-save or when no frame was written
    num_blocks: int
    num_frames: int
    seconds: float
    action_log: list[str | None] = field(default_factory=list)
    prompt_log: list[tuple[int, str]] = field(default_factory=list)
    interrupted: bool = False
    world_files: list[Path] = field(default_factory=list)  # world states written (--save), in order


def register(subparsers: Any) -> None:
    """Add the `play` subcommand."""
    p = subparsers.add_parser(
        "play", help="drive a world model live in the browser (keyboard → actions)",
        description="Open a live view of an open-ended stream and steer it: keys send the model's actions, the "
                    "prompt box switches the prompt (text models). Inputs apply at the next block boundary. "
                    "The stream is also saved as mp4 unless --no-save.")  # fmt: skip
    p.add_argument(
        "source",
        nargs="?",
        default="bundled",
        help="'bundled' (default), a transformer checkpoint, or a workflow .json (its LoadWorldModel, "
        "KV cache and BlockDenoise settings are used)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default; others expose input)")
    p.add_argument("--port", type=int, default=8765, help="TCP port of the live view; 0 picks a free one")
    p.add_argument("--width", type=int, default=None, help="pixels (default: the workflow's, the model's, or 832)")
    p.add_argument("--height", type=int, default=None, help="pixels (default: the workflow's, the model's, or 480)")
    p.add_argument("--seed", type=int, default=None, help="noise seed (default: the workflow's, or 0)")
    p.add_argument("--prompt", default=None, help="starting prompt (text models)")
    p.add_argument("--open", action="store_true", help="open the live view in the default browser")
    p.add_argument("--output", default=None, help="mp4 path (default: output/inferix_play_NNNNN.mp4)")
    p.add_argument("--no-save", action="store_true", help="do not write an mp4")
    p.add_argument("--max-blocks", type=int, default=None, help="stop after this many blocks")
    p.add_argument(
        "--save",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="save the world when the session ends (and at each 'save' input: the page's save button or POST "
        '/input {"type": "save"}, as FILE_NNNNN) to FILE, a new .safetensors file (never overwritten; '
        "default output/inferix_world_NNNNN.safetensors); --resume continues it",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="FILE",
        help="continue a world saved with --save (the same model, size and cache settings; the prompt, seed "
        "and held action come from the file)",
    )
    p.add_argument(
        "--hard-switch",
        action="store_true",
        help="on a prompt switch keep the cached K/V (faster, less smooth) instead of re-caching the window",
    )
    p.add_argument(
        "--no-hold",
        action="store_true",
        help="an action lasts one block, then the model's idle action (default: held until the next key)",
    )
    add_family_arguments(p)
    p.add_argument("--image", default=None, help="start image of an image-started model (Matrix-Game 2.0)")
    p.add_argument(
        "--clip-vision",
        default=None,
        help="CLIP vision file for the start image (models/clip_vision/clip_vision_h.safetensors)",
    )
    p.add_argument("--vae", default=None, help="VAE file for a checkpoint")
    p.add_argument("--text-encoder", default=None, help="umT5 file for a checkpoint")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, fp32, bf16 or fp16")
    # the opt-in speed options of `load_world_model`; with a workflow, either the flag or its loader's input turns one on
    p.add_argument(
        "--fp8",
        action="store_true",
        help="transformer-block linears as fp8 e4m3 GEMMs: faster and half the block weights' memory on "
        "CUDA compute capability >= 8.9, a small quality cost, emulated (slow) elsewhere",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile each transformer block (~1.3x faster diffusion on an H200); the first block "
        "compiles first (a one-off wait)",
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="capture each transformer call as a CUDA graph and replay it (CUDA only; logged and eager elsewhere)",
    )
    add_memory_arguments(p)
    add_lora_option(p)  # with a workflow: its Load World Model LoRA nodes, then these
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load, serve, play until stopped; print where the video went."""
    setup = load_setup(args)
    width = args.width or setup.width
    height = args.height or setup.height
    if width is None or height is None:
        default = IMAGE_MODEL_SIZE if takes_start_image(setup.world_model) else DEFAULT_SIZE
        width, height = width or default[0], height or default[1]
    save = world_save_path(args.save)
    resume = read_world_state(args.resume) if args.resume else None
    if args.no_save:
        output = None
    elif args.output:
        output = Path(args.output)
    else:
        output = unique_path("output", "inferix_play", "mp4")

    def ready(view: LiveView) -> None:
        keys = ", ".join(f"{k} → {a}" for k, a in view.key_actions.items()) or "none (this model takes no actions)"
        if view.controls is not None:
            keys = view.controls.describe_keys() + ("; click the video for mouse-look" if view.controls.mouse else "")
        print(f"live view: {view.url}  (keys: {keys}; Ctrl-C or the page's stop button ends the session)")
        if args.open:
            webbrowser.open(view.url)

    result = play(
        setup.world_model,
        prompt=args.prompt if args.prompt is not None else setup.prompt,
        width=width,
        height=height,
        seed=args.seed if args.seed is not None else setup.seed,
        host=args.host,
        port=args.port,
        output=output,
        cache=setup.cache,
        max_blocks=args.max_blocks,
        hard_switch=args.hard_switch,
        hold_actions=not args.no_hold,
        on_ready=ready,
        start_image=args.image or setup.start_image,
        clip_vision=args.clip_vision or setup.clip_vision,
        save=save,
        world_state=resume,
    )
    for path in result.world_files:
        print(f"world state: {path}")
    how = "interrupted" if result.interrupted else "stopped"
    print(f"{how} after {result.num_blocks} blocks ({result.num_frames} frames, {result.seconds:.1f} s)")
    if result.output is not None:
        print(f"video: {result.output}")
    return 130 if result.interrupted else 0  # Ctrl-C / SIGTERM: the shell convention, after publishing


def play(
    world_model: WorldModel,
    *,
    prompt: str = "",
    width: int,
    height: int,
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
    output: str | Path | None = None,
    cache: KVCacheConfig | None = None,
    max_blocks: int | None = None,
    hard_switch: bool = False,
    hold_actions: bool = True,
    key_actions: Mapping[str, str] | None = None,
    on_ready: Callable[[LiveView], None] | None = None,
    start_image: Any = None,
    clip_vision: Any = None,
    save: str | Path | None = None,
    world_state: WorldState | None = None,
) -> PlayResult:
    """Serve a LiveView, run an InteractiveSession on its inputs, and close everything cleanly.

    Returns when the page sends stop, after `max_blocks`, or on Ctrl-C (KeyboardInterrupt is absorbed:
    the sinks close, so the mp4 is complete up to the last finished block).
    With `save`, the world is written there when the session ends and, at each "save" input, to
    `<stem>_NNNNN.safetensors` beside it (never overwriting); `world_state` continues a saved world.
    """
    controls = control_spec_of(world_model) if start_image_role(world_model, start_image) == "image_world" else None
    keys = dict(key_actions) if key_actions is not None else key_map(world_model.action_names)
    if controls is not None:  # keyboard/mouse models: held keys and mouse-look, no named actions
        keys = {}
    # a model without a text encoder runs on its default context (the bundled v1): no prompt box to mislead;
    # a fixed-vocabulary encoder (the bundled v2) gets the box, with its words as the placeholder
    takes_prompt = controls is None and world_model.text_encoder is not None
    hint = None
    if isinstance(world_model.text_encoder, VocabularyPromptEncoder):
        hint = f"Name a scene ({world_model.text_encoder.config.hint()}); Ctrl+Enter sends"
    view = LiveView(host, port, fps=world_model.fps, key_actions=keys, controls=controls, takes_prompt=takes_prompt,
                    prompt_hint=hint)  # fmt: skip
    sinks: list[Any] = [view]
    mp4 = Mp4Sink(output, fps=world_model.fps) if output is not None else None
    if mp4 is not None:
        sinks.append(mp4)
    idle = "none" if "none" in world_model.action_names else None
    t0 = time.perf_counter()
    session = None
    interrupted = False
    world_files: list[Path] = []
    try:
        view.start()
        session = InteractiveSession(
            world_model,
            prompt,
            width=width,
            height=height,
            seed=seed,
            cache=cache,
            sinks=sinks,
            inputs=view.inputs,
            hard_switch=hard_switch,
            hold_actions=hold_actions,
            default_action=idle,
            start_image=start_image,
            clip_vision=clip_vision,
            world_state=world_state,
        )
        if on_ready is not None:
            on_ready(view)

        def on_block(block: SessionBlock) -> None:
            view.post_stats(block_stats(block))
            if save is not None:
                while session.save_requests > len(world_files):  # a "save" input, applied at this boundary
                    path = Path(save)
                    world_files.append(session.save_world(unique_path(path.parent, path.stem, "safetensors")))

        session.run(max_blocks=max_blocks, on_block=on_block)
    except KeyboardInterrupt:
        interrupted = True
        log.info("interrupted: closing the stream")
    finally:
        if session is not None and save is not None:
            try:
                world_files.append(session.save_world(save))  # a save input at the very end is this one too
            except InferixError as exc:
                log.error("the world was not saved: %s", exc)
        if session is not None:
            session.close()  # closes the view and publishes the mp4
        else:
            for sink in sinks:
                sink.close()
    published = mp4.path if mp4 is not None and mp4.path.exists() else None
    return PlayResult(
        url=view.url, output=published, num_blocks=session.num_blocks if session else 0, num_frames=view.num_frames,
        seconds=time.perf_counter() - t0, action_log=list(session.action_log) if session else [],
        prompt_log=list(session.prompt_log) if session else [], interrupted=interrupted, world_files=world_files,
    )  # fmt: skip


def world_save_path(value: str | None) -> Path | None:
    """--save's file: None (not saving), output/inferix_world_NNNNN.safetensors (no name), or a new FILE.

    Checked before the session starts, so a taken name never costs the session's world at the end.
    """
    if value is None:
        return None
    if not value:
        return unique_path("output", "inferix_world", "safetensors")
    path = Path(value)
    if path.suffix != ".safetensors":
        raise ConfigError(f"--save {value}: a world state is a .safetensors file; use a name such as world.safetensors")
    if path.exists():
        raise ConfigError(f"--save {value}: the file exists and is never overwritten; choose a new name")
    if not path.parent.is_dir():
        raise MissingFileError(f"--save {value}: the folder '{path.parent}' does not exist")
    return path


def block_stats(block: SessionBlock) -> dict[str, Any]:
    """What the page's stats panel gets per block (beside the view's own frame timing)."""
    return {"type": "session", "block": block.index, "action": block.action, "prompt": block.prompt[:80],
            "prompt_switched": block.prompt_switched, "denoise_s": block.denoise_s, "decode_s": block.decode_s,
            "recache_s": block.recache_s}  # fmt: skip


def key_map(action_names: Sequence[str]) -> dict[str, str]:
    """Keyboard keys → this model's action names.

    WASD and the arrows map through ACTION_SYNONYMS, `x` to "none" (release), and any action still
    without a key gets a digit key 1-9, so every action can be sent.
    """
    names = list(action_names)
    keys: dict[str, str] = {}
    for key, generic in DEFAULT_KEY_ACTIONS.items():
        match = next((n for n in ACTION_SYNONYMS.get(generic, (generic,)) if n in names), None)
        if match is not None:
            keys[key] = match
    if "none" in names:
        keys[IDLE_KEY] = "none"
    unmapped = [n for n in names if n not in keys.values()]
    for digit, name in zip("123456789", unmapped, strict=False):
        keys[digit] = name
    return keys


def load_setup(args: argparse.Namespace) -> PlaySetup:
    """The model and settings from SOURCE: 'bundled', a checkpoint path, or a workflow .json."""
    source = args.source
    if source.endswith(".json"):
        return _setup_from_workflow(Path(source), args)
    world_model = load_world_model(source, load_options_from_args(args))
    width, height = bundled_size() if source == "bundled" else (None, None)
    return PlaySetup(world_model, width=width, height=height)


def bundled_size() -> tuple[int | None, int | None]:
    """The pixel size the bundled model was trained at (its config.json), if it says."""
    try:
        from ..assets import bundled_model_paths

        paths = bundled_model_paths()
        config_path = paths["config"] if isinstance(paths, Mapping) else paths.config
        meta = json.loads(Path(config_path).read_text())
    except (ImportError, MissingFileError, OSError, ValueError, KeyError, AttributeError):
        return None, None
    return meta.get("width"), meta.get("height")


def _setup_from_workflow(path: Path, args: argparse.Namespace) -> PlaySetup:
    """Take the model, cache and generation settings from a workflow's Inferix nodes (API or UI format)."""
    if not path.exists():
        raise MissingFileError(f"workflow '{path}' does not exist")
    try:
        graph = json.loads(path.read_text())
    except ValueError as exc:
        raise WorkflowError(f"'{path}' is not valid JSON: {exc}") from exc
    nodes = _node_inputs(graph)
    loader = nodes.get("InferixLoadWorldModel")
    if loader is None:
        raise WorkflowError(f"'{path}' has no InferixLoadWorldModel node; `inferix play` needs one to pick the model")

    widgets = {**loader, **_loader_flags(args)}  # a flag given on the command line wins over the workflow
    memory = memory_settings_from_args(args)
    if memory == MemorySettings() and "InferixMemorySettings" in nodes:  # no memory flag: the workflow's node
        memory = memory_settings(nodes["InferixMemorySettings"])
    options = load_options(
        widgets, resolve=_resolve_model_file, memory=memory, lora=_workflow_loras(graph) + list(args.lora)
    )
    world_model = load_world_model(model_file("model", loader.get("model", "bundled"), _resolve_model_file), options)
    kv = nodes.get("InferixKVCacheConfig")
    cache = cache_config(kv) if kv is not None else None
    gen = nodes.get("InferixBlockDenoise", {})
    prompt = gen.get("prompt") if isinstance(gen.get("prompt"), str) else ""
    image = nodes.get("LoadImage", {}).get("image")  # core Load Image: a file in ComfyUI's input folder
    clip = nodes.get("CLIPVisionLoader", {}).get("clip_name")
    return PlaySetup(
        world_model,
        prompt=prompt,
        width=gen.get("width"),
        height=gen.get("height"),
        seed=int(gen.get("seed", 0)),
        cache=cache,
        start_image=_resolve_input_image(image) if image and not args.image else None,
        clip_vision=_resolve_model_file("clip_vision", clip) if clip and not args.clip_vision else None,
    )


def _loader_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The loader settings given as flags: a speed option turned on, dtype, device, family or weights not 'auto'."""
    flags: dict[str, Any] = {name: True for name in ("fp8", "compile", "cuda_graphs") if getattr(args, name)}
    flags.update({name: getattr(args, name) for name in ("dtype", "device", "family", "weights")
                  if getattr(args, name) != "auto"})  # fmt: skip
    return flags


def _resolve_input_image(name: str) -> str:
    """A workflow's Load Image file, only inside $INFERIX_INPUT_DIR (ComfyUI's input folder) or ./input."""
    root = Path(os.environ.get("INFERIX_INPUT_DIR") or "input").resolve()
    text = str(name).split(" [input]")[0].strip()
    path = (root / text).resolve()  # an absolute name, `..` or a link out resolves outside the folder
    if root not in path.parents:
        raise ConfigError(
            f"start image '{text}' is outside the input folder ({root}): put it there, or pass --image PATH"
        )
    if not path.is_file():
        raise MissingFileError(f"start image '{text}' is not in {root}: pass --image PATH, or set INFERIX_INPUT_DIR")
    return str(path)


def _node_inputs(graph: Any) -> dict[str, dict[str, Any]]:
    """class_type → literal inputs of its first node. API format only: UI-format widget lists carry no names."""
    if isinstance(graph, dict) and "nodes" in graph and isinstance(graph["nodes"], list):
        raise WorkflowError("this is a UI-format workflow; export it with Workflow → Export (API) for `inferix play`")
    if not isinstance(graph, dict):
        raise WorkflowError("a workflow must be a JSON object of nodes")
    found: dict[str, dict[str, Any]] = {}
    for node in graph.values():
        if isinstance(node, dict) and "class_type" in node:
            inputs = {k: v for k, v in node.get("inputs", {}).items() if not isinstance(v, list)}  # links are lists
            found.setdefault(node["class_type"], inputs)
    return found


def _workflow_loras(graph: dict) -> list[tuple[str, float]]:
    """(file, strength) of every InferixLoadWorldModelLoRA node in an API-format workflow."""
    return [
        (_resolve_model_file("loras", node["inputs"]["lora_name"]), float(node["inputs"].get("strength", 1.0)))
        for node in graph.values()
        if isinstance(node, dict) and node.get("class_type") == "InferixLoadWorldModelLoRA"
    ]


def _resolve_model_file(folder: str, name: str) -> str:
    """A workflow's file name → a path: as given, else under $INFERIX_MODELS_DIR/<folder>/ ('bundled' passes)."""
    if name == "bundled" or Path(name).is_file():
        return name
    root = os.environ.get("INFERIX_MODELS_DIR")
    if root and (Path(root) / folder / name).is_file():
        return str(Path(root) / folder / name)
    raise MissingFileError(
        f"'{name}' ({folder}) was not found: give a path, or set INFERIX_MODELS_DIR to a folder with {folder}/{name}"
    )


__all__ = ["PlayResult", "PlaySetup", "key_map", "play", "register"]
