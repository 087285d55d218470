"""`inferix queue WORKFLOW.json --server URL`: run a workflow on a ComfyUI server and fetch its outputs.

Submits with POST /prompt, follows progress on the websocket (or by polling /history without
websocket-client), then downloads every file the output nodes reported through /view. Validation
and execution errors come back as the server's own text, and the command exits non-zero.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ..workflow import NodeSchema, apply_overrides, is_ui_workflow, load_workflow
from ..workflow.client import ComfyClient, ProgressEvent, ServerError, output_files
from ..workflow.loader import read_json

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 3600.0  # every wait is bounded: a stuck or hostile server cannot hold the CLI forever


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"--timeout must be a positive number of seconds, got {text}")
    return value


def register(subparsers: Any) -> None:
    """Add the `queue` subcommand."""
    p = subparsers.add_parser(
        "queue",
        help="run a workflow on a ComfyUI server and download its outputs",
        description="Queue a ComfyUI workflow on a running server, show its progress and "
        "download what its output nodes saved.",
    )
    p.add_argument("workflow", help="workflow .json (API format; UI format is converted with the server's node list)")
    p.add_argument("--server", default="http://127.0.0.1:8188", help="ComfyUI address (default %(default)s)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NODE_ID.INPUT=VALUE",
        help="override an input, e.g. --set 3.seed=42 (JSON values parsed)",
    )
    p.add_argument("--output-dir", default="output", help="where downloaded outputs go (default ./%(default)s)")
    p.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="give up waiting for the run after S seconds (default %(default)g); each request has its own 30 s limit",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Queue, follow, download; print where the files went."""
    client = ComfyClient(args.server)
    data = read_json(args.workflow)
    schemas = None
    if is_ui_workflow(data) or args.overrides:
        schemas = {name: NodeSchema.from_object_info(name, info) for name, info in client.object_info().items()}
    workflow = load_workflow(data, schemas)
    workflow = apply_overrides(workflow, args.overrides, schemas)

    client_id = uuid.uuid4().hex
    ws = client.connect(client_id)
    start = time.perf_counter()
    try:
        prompt_id = client.submit(workflow, client_id)
        print(f"queued prompt {prompt_id} on {client.server}")
        with _ProgressBars(enabled=not args.no_progress) as bars:
            try:
                result = client.wait(prompt_id, ws, args.timeout, bars.update)
            except KeyboardInterrupt:
                client.interrupt()
                print("interrupt sent to the server")
                raise
    finally:
        if ws is not None:
            ws.close()

    out_dir = Path(args.output_dir).resolve()
    files, refused = [], []
    for _node_id, entry in output_files(result.outputs):
        kind = entry.get("type") or "output"
        dest_dir = out_dir if kind == "output" else out_dir / str(kind)  # confined_download_path checks kind
        try:
            files.append(client.download(entry, dest_dir))
        except ServerError as exc:
            refused.append(str(exc))
    print(f"finished in {time.perf_counter() - start:.1f} s")
    if files:
        print("outputs:")
        for path in files:
            print(f"  {path}")
    elif not refused:
        print("the workflow reported no output files")
    for message in refused:
        print(f"error: {message}", file=sys.stderr)
    return 2 if refused else 0


class _ProgressBars:
    """One tqdm bar per node that reports progress."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.node: str | None = None
        self.bar: Any = None

    def __enter__(self) -> _ProgressBars:
        return self

    def update(self, event: ProgressEvent) -> None:
        if not self.enabled:
            return
        from tqdm.auto import tqdm

        if event.node_id != self.node or self.bar is None or self.bar.total != event.max:
            self.close()
            self.node = event.node_id
            self.bar = tqdm(total=event.max, desc=f"node {event.node_id}", dynamic_ncols=True)
        self.bar.update(event.value - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __exit__(self, *exc: object) -> None:
        self.close()
