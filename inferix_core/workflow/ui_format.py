"""Convert a ComfyUI UI-format workflow (the graph the editor saves) into API format.

The editor's file stores widget values as a positional list (`widgets_values`) and links in a
separate table; API format is `{node_id: {class_type, inputs}}`. Turning one into the other needs each
node's input declaration order, so it only works for node types whose definitions we have. This
mirrors what the frontend's graph-to-prompt step does; it does not handle subgraphs or group nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..errors import WorkflowError
from .schema import InputSpec, NodeSchema

log = logging.getLogger(__name__)

EXPORT_HINT = (
    "Export the workflow in API format instead: in ComfyUI use the menu Workflow → Export (API) "
    "(older frontends: enable dev mode in the settings and use 'Save (API Format)')."
)

# Frontend-only nodes: they never reach the server.
NOTE_TYPES = frozenset({"Note", "MarkdownNote"})
REROUTE_TYPES = frozenset({"Reroute"})
PRIMITIVE_TYPES = frozenset({"PrimitiveNode"})
VIRTUAL_TYPES = NOTE_TYPES | REROUTE_TYPES | PRIMITIVE_TYPES

# LiteGraph node modes: 0 always, 2 never (muted), 4 bypass.
MODE_MUTED = 2
MODE_BYPASS = 4

# Values of the extra "control_after_generate" widget the frontend adds after seed-like inputs.
CONTROL_VALUES = frozenset({"fixed", "increment", "decrement", "randomize", "increment-wrap"})
SEED_NAMES = frozenset({"seed", "noise_seed"})
UPLOAD_OPTIONS = ("image_upload", "video_upload", "audio_upload", "animated_image_upload")


def is_ui_workflow(data: Any) -> bool:
    """True for the editor's format: a dict with `nodes` and `links` lists."""
    return isinstance(data, Mapping) and isinstance(data.get("nodes"), list) and isinstance(data.get("links"), list)


def check_ui_shape(ui: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the node, a UI-format file whose nodes are not shaped as the editor saves them.

    Hand-edited or generated files put ints where slot objects belong, lists where type names do, and so
    on; the conversion below may then assume the shape it reads.
    """
    for index, node in enumerate(ui["nodes"]):
        where = f"UI-format workflow node #{index}"
        if not isinstance(node, Mapping):
            raise WorkflowError(f"{where} is a {type(node).__name__}, not an object. {EXPORT_HINT}")
        if not isinstance(node.get("id"), (int, str)) or isinstance(node.get("id"), bool):
            raise WorkflowError(f"{where} has no integer or string 'id'. {EXPORT_HINT}")
        where = f"UI-format workflow node {node['id']}"
        if not isinstance(node.get("type"), str):
            raise WorkflowError(f"{where}: 'type' must be a node type name, got {type(node.get('type')).__name__}")
        for key in ("inputs", "outputs"):
            slots = node.get(key)
            if slots is None:
                continue
            if not isinstance(slots, list) or not all(isinstance(slot, Mapping) for slot in slots):
                raise WorkflowError(
                    f"{where}: '{key}' must be a list of slot objects ({{name, type, link}}). {EXPORT_HINT}"
                )
            for slot in slots:
                if not isinstance(slot.get("name", ""), str) or isinstance(slot.get("link"), (list, dict, bool, float)):
                    raise WorkflowError(f"{where}: a slot in '{key}' has a malformed name or link. {EXPORT_HINT}")
        if not isinstance(node.get("widgets_values"), (list, dict, type(None))):
            raise WorkflowError(f"{where}: 'widgets_values' must be a list. {EXPORT_HINT}")
        if not isinstance(node.get("mode", 0), int):
            raise WorkflowError(f"{where}: 'mode' must be an integer")


def convert_ui_workflow(ui: Mapping[str, Any], schemas: Mapping[str, NodeSchema]) -> dict[str, dict[str, Any]]:
    """Return the API-format equivalent of a UI-format workflow.

    Args:
        ui: the parsed workflow file (`nodes`, `links`, ...).
        schemas: NodeSchema per class type; every non-virtual node's type must be in it.

    Raises:
        WorkflowError: unknown node types, subgraphs, or a malformed graph; the message says how to
            export API format instead.
    """
    nodes = {str(n["id"]): n for n in ui["nodes"] if isinstance(n, Mapping) and "id" in n}
    links = _link_table(ui["links"])
    subgraph_ids = {str(s.get("id")) for s in (ui.get("definitions") or {}).get("subgraphs", []) or []}

    unknown = sorted(
        {
            str(n.get("type"))
            for n in nodes.values()
            if n.get("type") not in VIRTUAL_TYPES
            and n.get("type") not in schemas
            and n.get("mode", 0) not in (MODE_MUTED, MODE_BYPASS)
        }
    )
    if unknown:
        sub = [t for t in unknown if t in subgraph_ids]
        what = "subgraphs, which cannot be converted here" if sub else "node types whose definitions are not loaded"
        raise WorkflowError(f"this is a UI-format workflow and it uses {what}: {', '.join(unknown)}. {EXPORT_HINT}")

    api: dict[str, dict[str, Any]] = {}
    for node_id, node in nodes.items():
        kind = node.get("type")
        if kind in VIRTUAL_TYPES or node.get("mode", 0) in (MODE_MUTED, MODE_BYPASS):
            continue
        schema = schemas[kind]
        inputs = _widget_inputs(node_id, node, schema)
        for slot in node.get("inputs") or []:
            link_id = slot.get("link")
            if link_id is None:
                continue
            source = _resolve_source(link_id, nodes, links, set())
            if source is None:
                inputs.pop(slot["name"], None)  # fed by a muted node: leave it unconnected
            else:
                inputs[slot["name"]] = source
        api[node_id] = {"class_type": kind, "inputs": inputs}
        if node.get("title"):
            api[node_id]["_meta"] = {"title": node["title"]}
    log.info("converted UI-format workflow to API format (%d nodes)", len(api))
    return api


def _link_table(raw_links: list[Any]) -> dict[int, tuple[str, int, str]]:
    """link id → (origin node id, origin slot, type). Links are lists or dicts depending on version."""
    table: dict[int, tuple[str, int, str]] = {}
    for link in raw_links:
        if isinstance(link, Mapping):
            table[int(link["id"])] = (str(link["origin_id"]), int(link["origin_slot"]), str(link.get("type", "*")))
        elif isinstance(link, (list, tuple)) and len(link) >= 5:
            table[int(link[0])] = (str(link[1]), int(link[2]), str(link[5]) if len(link) > 5 else "*")
        else:
            raise WorkflowError(f"UI-format workflow has a malformed link entry {link!r}. {EXPORT_HINT}")
    return table


def _takes_control_widget(spec: InputSpec) -> bool:
    """Whether the frontend adds a 'control after generate' widget after this input.

    An explicit `control_after_generate` option decides; otherwise INT inputs named seed/noise_seed
    get one (the frontend's legacy convention).
    """
    if "control_after_generate" in spec.options:
        return bool(spec.options["control_after_generate"])
    return spec.type_name == "INT" and spec.name in SEED_NAMES


def _widget_inputs(node_id: str, node: Mapping[str, Any], schema: NodeSchema) -> dict[str, Any]:
    """Map a node's widgets_values onto its widget inputs, in declaration order."""
    values = node.get("widgets_values")
    if values is None:
        return {}
    if isinstance(values, Mapping):  # some nodes save widgets by name
        return {s.name: values[s.name] for s in schema.widget_inputs if s.name in values}
    values = list(values)
    widgets = schema.widget_inputs
    inputs: dict[str, Any] = {}
    i = 0
    for k, spec in enumerate(widgets):
        if i >= len(values):
            break
        inputs[spec.name] = values[i]
        i += 1
        if _takes_control_widget(spec) and i < len(values) and values[i] in CONTROL_VALUES:
            i += 1  # the control_after_generate companion: a frontend setting, not an input
        remaining_widgets = len(widgets) - k - 1
        if any(spec.options.get(o) for o in UPLOAD_OPTIONS) and len(values) - i > remaining_widgets:
            i += 1  # the upload button's placeholder value
    if i < len(values):
        log.warning(
            "node %s (%s): %d widget value(s) left over after mapping %d inputs; "
            "the node definition may differ from the one the workflow was saved with",
            node_id,
            schema.class_type,
            len(values) - i,
            len(widgets),
        )
    return inputs


def _resolve_source(
    link_id: int, nodes: Mapping[str, Any], links: Mapping[int, tuple[str, int, str]], seen: set[int]
) -> list[Any] | Any | None:
    """Follow a link back through reroutes, primitives and bypassed nodes.

    Returns `[origin_id, slot]` for a real node, a constant for a PrimitiveNode, or None when the
    chain ends at a muted node or an unconnected reroute.
    """
    if link_id in seen:
        raise WorkflowError(f"UI-format workflow has a loop through reroute/bypassed nodes at link {link_id}")
    seen.add(link_id)
    if link_id not in links:
        raise WorkflowError(
            f"UI-format workflow refers to link {link_id}, which is not in its links table. " + EXPORT_HINT
        )
    origin_id, slot, link_type = links[link_id]
    origin = nodes.get(origin_id)
    if origin is None:
        raise WorkflowError(f"UI-format workflow links from node {origin_id}, which does not exist", node_id=origin_id)
    kind = origin.get("type")
    if kind in PRIMITIVE_TYPES:
        values = origin.get("widgets_values") or []
        if not values:
            raise WorkflowError(
                "PrimitiveNode has no value; set it in the editor or export API format", node_id=origin_id
            )
        return values[0]
    if kind in REROUTE_TYPES:
        upstream = (origin.get("inputs") or [{}])[0].get("link")
        return None if upstream is None else _resolve_source(upstream, nodes, links, seen)
    mode = origin.get("mode", 0)
    if mode == MODE_MUTED:
        return None
    if mode == MODE_BYPASS:
        # A bypassed node passes through its first input of the same type as the requested output.
        out_type = link_type
        outputs = origin.get("outputs") or []
        if slot < len(outputs):
            out_type = str(outputs[slot].get("type", link_type))
        candidates = [s for s in origin.get("inputs") or [] if s.get("link") is not None]
        for cand in candidates:
            if str(cand.get("type")) == out_type or "*" in (out_type, str(cand.get("type"))):
                return _resolve_source(cand["link"], nodes, links, seen)
        return None
    return [origin_id, slot]


# --- layout of UI-format files we write (workflows/build.py) -------------------------------------------
TITLE_HEIGHT = 30  # LiteGraph draws a node's title bar above its `pos`
LAYOUT_GAP = 60  # px between nodes, and between columns


def node_box(node: dict[str, Any]) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of a UI node on the canvas, its title bar included."""
    (x, y), (w, h) = node["pos"], node["size"]
    return x, y - TITLE_HEIGHT, x + w, y + h


def lay_out(nodes: list[dict[str, Any]], links: list[list[Any]]) -> None:
    """Set each node's `pos` (its `size` set already): a column per depth of the graph, left to right,
    nodes stacked in their order within a column, nothing overlapping at the sizes given."""
    sources: dict[Any, list[Any]] = {}
    for _link_id, src, _slot, dst, *_ in links:
        sources.setdefault(dst, []).append(src)
    depth: dict[Any, int] = {}

    def depth_of(nid: Any, seen: frozenset = frozenset()) -> int:
        if nid not in depth:
            ups = [s for s in sources.get(nid, []) if s not in seen]
            depth[nid] = 1 + max((depth_of(s, seen | {nid}) for s in ups), default=-1)
        return depth[nid]

    columns: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        columns.setdefault(depth_of(node["id"]), []).append(node)
    x = 40.0
    for col in sorted(columns):
        y = 40.0 + TITLE_HEIGHT
        for node in columns[col]:
            node["pos"] = [x, y]
            y += node["size"][1] + TITLE_HEIGHT + LAYOUT_GAP
        x += max(n["size"][0] for n in columns[col]) + LAYOUT_GAP
