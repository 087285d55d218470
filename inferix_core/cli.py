"""The `inferix` command line.

Each subcommand lives in `inferix_core/commands/<name>.py` and exposes `register(subparsers)`, which
adds its parser and sets `func=run`. User mistakes (InferixError) print one clear line and exit 2;
a traceback only appears with --debug. Ctrl-C and SIGTERM exit 130 with one line, at any point.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from typing import Any

from .errors import GenerationInterruptedError, InferixError
from .stopping import STOP, stop_once

# Subcommand modules, in the order `inferix --help` lists them. A module that fails to import
# (an optional dependency missing) is reported when that subcommand is used, not at start-up.
COMMANDS = ["run", "queue", "play", "bench", "lvbench", "info"]

log = logging.getLogger("inferix")
INTERRUPTED_EXIT = 130  # 128 + SIGINT, the shell convention


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferix", description="Block-diffusion world-model inference engine")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            with _stop_signals_deferred():
                module = importlib.import_module(f"inferix_core.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("inferix_core.commands"):
                continue  # subcommand not shipped in this build
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(func=_unavailable(name, exc))
            continue
        module.register(sub)
    return parser


@contextlib.contextmanager
def _stop_signals_deferred():
    """Hold SIGINT/SIGTERM while the subcommands import (torch among them), then take them.

    A KeyboardInterrupt raised inside an extension module's initialisation (`import torch`) can abort the
    interpreter (exit -6) instead of unwinding. While the imports run, a recorder stands in for the Python
    handlers; afterwards the handlers come back and each recorded signal is raised again, so it stops the
    program as any other (exit 130). A signal mask alone is not enough: the kernel hands a process-directed
    signal to any thread that does not block it (torch's, pytest's), and Python then runs the handler on the
    main thread all the same. Main thread only (signal.signal's rule); elsewhere imports run as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops = (signal.SIGINT, signal.SIGTERM)
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum)) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(received):  # each kind once, in arrival order
            signal.raise_signal(sig)


def _unavailable(name: str, exc: Exception):
    def run(args: argparse.Namespace) -> int:
        raise InferixError(f"'inferix {name}' needs a package that is not installed: {exc}")

    return run


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; user mistakes exit 2 with one line, interrupts (Ctrl-C, SIGTERM) exit 130.

    The first SIGINT/SIGTERM raises KeyboardInterrupt (`inferix run` first asks the nodes to stop, see
    commands/run.py); later ones are ignored while outputs are published, so no second Ctrl-C can cut
    that short or end in a traceback. As the program itself (`argv` None) they stay ignored until exit.
    """
    previous = _install_stop_handlers()
    code: int | None = None  # stays None while an exception (a real bug) propagates
    try:
        try:
            code = _main(argv)
            return code
        except KeyboardInterrupt:  # during start-up, or a second Ctrl-C: one line, never a traceback
            STOP["raised"] = True
            print("interrupted", file=sys.stderr)
            code = INTERRUPTED_EXIT
            return code
        except Exception:
            # the interrupt may surface as another exception (Python wraps one raised inside a class body's
            # __set_name__ in a RuntimeError, e.g. while torch imports): after a stop signal it is the stop
            if not STOP["raised"]:
                raise
            print("interrupted", file=sys.stderr)
            code = INTERRUPTED_EXIT
            return code
        finally:
            _close_open_outputs()
    except KeyboardInterrupt:  # pragma: no cover - a signal between the handler's raise and its flag
        code = INTERRUPTED_EXIT
        return code
    finally:
        if argv is not None:  # called from Python (tests, scripts): give the caller its handlers back
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            STOP["raised"] = False
        else:  # the program is ending: a signal now must not become a traceback, or kill the exit (-2)
            STOP["raised"] = True
            if previous:  # SIG_IGN survives interpreter finalization (a Python handler is reset to SIG_DFL)
                for signum in previous:
                    signal.signal(signum, signal.SIG_IGN)
            if code == INTERRUPTED_EXIT:
                _exit_now(code)


def _exit_now(code: int) -> None:
    """Exit with `code` at once after an interrupt, everything flushed.

    Why not return: CPython 3.11 notes a KeyboardInterrupt that passed through code run by PyRun_*
    (extension modules' embedded scripts, e.g. during `import torch`) in a process-wide flag, and at the
    end kills the process with SIGINT (exit -2) even though we handled it. Outputs are closed already.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _install_stop_handlers() -> dict[int, Any]:
    """SIGTERM (kill, systemd, docker stop) stops like Ctrl-C, so outputs are published; returns the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    STOP["raised"] = False
    return {signum: signal.signal(signum, stop_once) for signum in (signal.SIGINT, signal.SIGTERM)}


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.debug else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GenerationInterruptedError as exc:
        if args.debug:
            raise
        print(f"interrupted: {exc}", file=sys.stderr)
        return INTERRUPTED_EXIT
    except InferixError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _close_open_outputs() -> None:
    """Publish (or remove) any mp4 an interrupt left open, e.g. when a second Ctrl-C cut a close short."""
    module = sys.modules.get("inferix_core.sinks.mp4")
    if module is not None:
        module.close_open_sinks()


if __name__ == "__main__":
    sys.exit(main())
