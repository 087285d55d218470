"""Run an API-format workflow headless: the same node classes ComfyUI would run, without ComfyUI.

Validates first, then calls each needed node's FUNCTION in dependency order inside
`torch.inference_mode()`, feeding links from upstream output tuples. No caching between runs, no
list mapping (INPUT_IS_LIST/OUTPUT_IS_LIST are passed through as-is) and no lazy inputs: one run,
one pass.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GenerationInterruptedError, InferixError, WorkflowError
from ..sinks.paths import make_output_dir, publish_mark, published_since
from .loader import Workflow, as_schemas, load_workflow
from .overrides import apply_overrides
from .progress import NullProgress, TqdmProgress, check_interrupt, clear_interrupt, use_progress
from .validation import id_sort_key, is_link, needed_nodes, output_nodes, validate

log = logging.getLogger(__name__)

OUTPUT_DIR_ENV = "INFERIX_OUTPUT_DIR"


@dataclass
class ExecutionResult:
    """What a run produced."""

    order: list[str]  # node ids in the order they ran
    outputs: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # node id → its output tuple
    ui: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id → its `ui` dict
    files: list[Path] = field(default_factory=list)  # files the output nodes reported or wrote
    seconds: dict[str, float] = field(default_factory=dict)  # node id → wall time


def execution_order(workflow: Workflow, targets: Iterable[str]) -> list[str]:
    """Ids of `targets` and their dependencies, each after everything it links from.

    Ties are broken by node id so the order is deterministic. The workflow must be acyclic
    (`validate` guarantees it).
    """
    needed = needed_nodes(workflow, list(targets))
    deps = {nid: {v[0] for v in workflow[nid]["inputs"].values() if is_link(v)} & needed for nid in needed}
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(needed):
        ready = sorted((n for n in needed if n not in done and deps[n] <= done), key=id_sort_key)
        if not ready:
            raise WorkflowError("the workflow has a cycle; run validate() for details")
        for nid in ready:
            order.append(nid)
            done.add(nid)
    return order


def execute(
    workflow: str | Path | Mapping[str, Any],
    node_classes: Mapping[str, Any],
    output_dir: str | Path | None = None,
    overrides: Any = None,
    progress: bool = True,
) -> ExecutionResult:
    """Validate and run a workflow; return its outputs and the files its output nodes wrote.

    Args:
        workflow: a path or parsed JSON (API format, or UI format the classes can convert).
        node_classes: class type → node class with the V1 interface (NODE_CLASS_MAPPINGS).
        output_dir: where output nodes save; exported as $INFERIX_OUTPUT_DIR while the run lasts.
        overrides: `--set` style overrides (see `apply_overrides`).
        progress: draw a tqdm bar per node and let nodes draw their block bars.

    Raises:
        WorkflowValidationError: before anything runs, listing every problem.
        WorkflowError: a node failed (message names the node); GenerationInterruptedError when interrupted.
    """
    import torch

    wf = load_workflow(workflow, node_classes)
    used = {n["class_type"] for n in wf.values()}
    wf = apply_overrides(wf, overrides, as_schemas({k: v for k, v in node_classes.items() if k in used}))
    wf = validate(wf, node_classes)
    schemas = as_schemas({k: v for k, v in node_classes.items() if k in used})
    order = execution_order(wf, output_nodes(wf, schemas))
    out_dir = make_output_dir(Path(output_dir or os.environ.get(OUTPUT_DIR_ENV) or "output").resolve())
    mark = publish_mark()
    result = ExecutionResult(order=order)
    clear_interrupt()
    log.info("running %d node(s): %s", len(order), ", ".join(f"{n}:{wf[n]['class_type']}" for n in order))

    with ExitStack() as stack:
        stack.enter_context(_environment(OUTPUT_DIR_ENV, str(out_dir)))
        stack.enter_context(torch.inference_mode())
        bar = _node_bar(len(order)) if progress else None
        if bar is not None:
            stack.callback(bar.close)
        for nid in order:
            node = wf[nid]
            if bar is not None:
                bar.set_description(f"node {nid} {node['class_type']}")
            check_interrupt()
            start = time.perf_counter()
            hook = TqdmProgress(position=1) if progress else NullProgress()
            with use_progress(hook):
                outputs, ui = _run_node(nid, node, node_classes[node["class_type"]], result.outputs, wf)
            result.seconds[nid] = time.perf_counter() - start
            result.outputs[nid] = outputs
            if ui:
                result.ui[nid] = ui
            log.debug("node %s (%s) done in %.2f s", nid, node["class_type"], result.seconds[nid])
            if bar is not None:
                bar.update(1)

    # what the output nodes reported, then what this process published meanwhile (frame folders): never a
    # file another run wrote into the same folder, nor the temp previews
    result.files = _reported_files(result.ui, out_dir)
    result.files += [p for p in published_since(mark) if p not in result.files and out_dir in p.resolve().parents]
    return result


def _run_node(
    nid: str, node: Mapping[str, Any], node_class: Any, done: Mapping[str, tuple[Any, ...]], workflow: Workflow
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Call one node's FUNCTION with its resolved inputs; return (outputs, ui)."""
    kwargs: dict[str, Any] = {}
    for name, value in node["inputs"].items():
        kwargs[name] = done[value[0]][value[1]] if is_link(value) else value
    declared = node_class.INPUT_TYPES()
    known = set(declared.get("required", {})) | set(declared.get("optional", {}))
    kwargs = {k: v for k, v in kwargs.items() if k in known}
    for name, kind in (declared.get("hidden") or {}).items():
        kind = kind[0] if isinstance(kind, (tuple, list)) else kind  # V3 shims declare ("UNIQUE_ID",)
        # DYNPROMPT: ComfyUI passes a DynamicPrompt; its original prompt is this dict. EXTRA_PNGINFO: None headless
        kwargs[name] = {"PROMPT": workflow, "DYNPROMPT": workflow, "UNIQUE_ID": nid}.get(kind)
    if getattr(node_class, "INPUT_IS_LIST", False):
        kwargs = {k: [v] for k, v in kwargs.items()}
    func_name = getattr(node_class, "FUNCTION", None)
    if not func_name:
        raise WorkflowError(f"{node['class_type']} has no FUNCTION attribute", node_id=nid)
    try:
        returned = getattr(node_class(), func_name)(**kwargs)
    except GenerationInterruptedError:
        raise
    except KeyboardInterrupt:
        raise GenerationInterruptedError(f"interrupted while running node {nid} ({node['class_type']})") from None
    except InferixError as exc:
        raise WorkflowError(f"{node['class_type']} failed: {exc}", node_id=nid) from exc
    except Exception as exc:
        raise WorkflowError(
            f"{node['class_type']} failed: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            node_id=nid,
        ) from exc
    return _normalize_return(nid, node["class_type"], returned)


def _normalize_return(nid: str, class_type: str, returned: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A node returns a tuple, a dict with `result`/`ui`, or (V3) an object with those attributes."""
    if returned is None:
        return (), {}
    if isinstance(returned, dict):
        result, ui = returned.get("result", ()), returned.get("ui") or {}
    elif isinstance(returned, (tuple, list)):
        result, ui = returned, {}
    elif hasattr(returned, "result") or hasattr(returned, "ui"):
        result, ui = getattr(returned, "result", ()) or (), getattr(returned, "ui", None) or {}
        if hasattr(ui, "as_dict"):
            ui = ui.as_dict()
    else:
        raise WorkflowError(
            f"{class_type} returned {type(returned).__name__}; expected a tuple or a dict with 'result' and 'ui'",
            node_id=nid,
        )
    return tuple(result or ()), dict(ui)


def _node_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="node", position=0, dynamic_ncols=True)


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """Set one environment variable for the duration of a `with` block."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _reported_files(ui: Mapping[str, Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Paths of the files named in `ui` dicts ({'images': [{'filename', 'subfolder', 'type'}], ...})."""
    files: list[Path] = []
    for entries in (e for node_ui in ui.values() for e in node_ui.values()):
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if isinstance(entry, Mapping) and "filename" in entry:
                if (entry.get("type") or "output") != "output":
                    continue  # previews in the temp folder are not outputs
                path = out_dir / str(entry.get("subfolder") or "") / str(entry["filename"])
            elif isinstance(entry, str) and os.path.isabs(entry):
                path = Path(entry)
            else:
                continue
            if path not in files:
                files.append(path)
    return files
