"""Stop signals: the first SIGINT/SIGTERM raises KeyboardInterrupt, every later one is ignored.

Shared by the CLI's entry point and `inferix run`'s graceful Ctrl-C, which must agree on whether a stop
already happened; it sits low (docs/architecture.md, "Layers") so both can import it.
"""

from __future__ import annotations

from typing import Any

STOP = {"raised": False}  # set once a stop signal has raised KeyboardInterrupt: later ones are ignored


def stop_once(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM handler: raise KeyboardInterrupt the first time, ignore every later signal."""
    if STOP["raised"]:
        return
    STOP["raised"] = True
    raise KeyboardInterrupt
