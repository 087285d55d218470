"""`inferix run WORKFLOW.json`: execute a ComfyUI workflow headless with the Inferix node classes.

The workflow is validated in full before any node runs. The node pack is found as the installed
`inferix_nodes` package, else as the `nodes/` folder of this checkout (a plain clone in
custom_nodes/), else through the checkout's own `__init__.py`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import BackendUnavailableError, InferixError
from ..workflow import OUTPUT_DIR_ENV, execute, request_interrupt

log = logging.getLogger(__name__)

INPUT_DIR_ENV = "INFERIX_INPUT_DIR"
NODES_MODULE_ENV = "INFERIX_NODES_MODULE"  # tests point this at a module of dummy node classes
PACK_NAME = "inferix_nodes"


def register(subparsers: Any) -> None:
    """Add the `run` subcommand."""
    p = subparsers.add_parser(
        "run",
        help="run a ComfyUI workflow (API format) headless",
        description="Validate and run a ComfyUI workflow JSON with the Inferix nodes, "
        "without ComfyUI. Export API format from ComfyUI with Workflow → Export (API).",
    )
    p.add_argument("workflow", help="workflow .json (API format; UI format if all its nodes are Inferix nodes)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NODE_ID.INPUT=VALUE",
        help="override an input, e.g. --set 3.seed=42 --set '6.text=a red car' (JSON values parsed)",
    )
    p.add_argument(
        "--output-dir", default=None, help=f"where output nodes write (default: ${OUTPUT_DIR_ENV} or ./output)"
    )
    p.add_argument(
        "--input-dir",
        default=None,
        help=f"the folder nodes read input files from, as ComfyUI's input/ folder: caption files, world states "
        f"(default: ${INPUT_DIR_ENV} or ./input); names in the workflow must stay inside it",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--nodes-module", default=None, help=argparse.SUPPRESS)  # dummy node classes, for tests
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the workflow and print where its outputs went."""
    node_classes = load_node_classes(args.nodes_module)
    output_dir = Path(args.output_dir or os.environ.get(OUTPUT_DIR_ENV) or "output").resolve()
    input_dir = Path(args.input_dir or os.environ.get(INPUT_DIR_ENV) or "input").resolve()
    _tell_pack_output_dir(output_dir)
    _tell_pack_dir("set_input_dir", input_dir)
    start = time.perf_counter()
    try:
        with _graceful_ctrl_c():
            result = execute(
                args.workflow,
                node_classes,
                output_dir=output_dir,
                overrides=args.overrides,
                progress=not args.no_progress,
            )
    finally:  # the pack's folder is process-wide: a later run or caller in this process must not inherit it
        _tell_pack_output_dir(None)
        _tell_pack_dir("set_input_dir", None)
    print(f"ran {len(result.order)} node(s) in {time.perf_counter() - start:.1f} s")
    for node_id, ui in result.ui.items():  # what ComfyUI would show on the nodes (reports, plans, tables)
        for text in ui.get("text", []) if isinstance(ui, dict) else []:
            print(f"node {node_id}:\n  " + str(text).replace("\n", "\n  "))
    if result.files:
        print("outputs:")
        for path in result.files:
            print(f"  {path}")
    else:
        print(f"no output files were written (output dir: {output_dir})")
    return 0


def load_node_classes(module_name: str | None = None) -> dict[str, Any]:
    """NODE_CLASS_MAPPINGS of the node pack, or of `module_name` / $INFERIX_NODES_MODULE when given."""
    name = module_name or os.environ.get(NODES_MODULE_ENV)
    module = importlib.import_module(name) if name else import_node_pack()
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    if not isinstance(mappings, dict) or not mappings:
        raise InferixError(
            f"{module.__name__} has no NODE_CLASS_MAPPINGS (or it is empty); the node pack did not load its nodes"
        )
    return mappings


def import_node_pack() -> ModuleType:
    """Import the Inferix node pack without ComfyUI.

    1. the installed package `inferix_nodes` (`pip install -e .`);
    2. else `<checkout>/nodes/__init__.py` loaded under the name `inferix_nodes` (a plain clone), through
       importlib with its own search location: sys.path is left alone.
    """
    try:
        return importlib.import_module(PACK_NAME)
    except ModuleNotFoundError as exc:
        if exc.name != PACK_NAME:
            raise BackendUnavailableError(f"the Inferix node pack failed to import: {exc}") from exc
    checkout = Path(__file__).resolve().parents[2]
    nodes_init = checkout / "nodes" / "__init__.py"
    if nodes_init.is_file():
        return _load_package(PACK_NAME, nodes_init)
    raise BackendUnavailableError(
        f"cannot find the Inferix node pack: '{PACK_NAME}' is not installed and "
        f"{nodes_init} does not exist. Run `pip install -e .` in the checkout."
    )


def _load_package(name: str, init_file: Path) -> ModuleType:
    """Import the package whose __init__.py is `init_file` under `name` (relative imports work)."""
    spec = importlib.util.spec_from_file_location(name, init_file, submodule_search_locations=[str(init_file.parent)])
    if spec is None or spec.loader is None:
        raise BackendUnavailableError(f"cannot import {init_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        raise BackendUnavailableError(f"the Inferix node pack at {init_file.parent} failed to import: {exc}") from exc
    log.debug("imported the node pack from %s as %s", init_file.parent, name)
    return module


def _tell_pack_output_dir(path: Path | None) -> None:
    """Point the pack's output folder at `path` (None: back to its default; it also reads $INFERIX_OUTPUT_DIR)."""
    _tell_pack_dir("set_output_dir", path)


def _tell_pack_dir(setter_name: str, path: Path | None) -> None:
    """Call the pack's `setter_name` (set_output_dir / set_input_dir) with `path` (None: back to its default)."""
    for module_name in (PACK_NAME, f"{PACK_NAME}.comfy_runtime"):
        module = sys.modules.get(module_name)
        setter = getattr(module, setter_name, None)
        if callable(setter):
            setter(None if path is None else str(path))
            return


@contextmanager
def _graceful_ctrl_c() -> Iterator[None]:
    """First Ctrl-C (or SIGTERM) asks the nodes to stop at their next check; a second one aborts at once.

    Either way the sinks close on the way out, so the video so far is published.
    """
    from ..stopping import stop_once

    pressed = []

    def handle(signum: int, frame: Any) -> None:
        if pressed:
            stop_once(signum, frame)  # raises KeyboardInterrupt once; any later signal is ignored
            return
        pressed.append(signum)
        print("\nstopping after the current step (Ctrl-C again to abort)", file=sys.stderr)
        request_interrupt()

    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handle)
    except ValueError:  # not the main thread: leave the signals alone
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
