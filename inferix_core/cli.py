"""The `inferix` command line.

Each subcommand lives in `inferix_core/commands/<name>.py` and exposes `register(subparsers)`, which
adds its parser and sets `func=run`. User mistakes (InferixError) print one clear line and exit 2;
a traceback only appears with --debug.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .errors import InferixError

# Subcommand modules, in the order `inferix --help` lists them. A module that fails to import
# (an optional dependency missing) is reported when that subcommand is used, not at start-up.
COMMANDS = ["run", "queue", "play", "bench", "lvbench", "info"]

log = logging.getLogger("inferix")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferix", description="Block-diffusion world-model inference engine")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"inferix_core.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("inferix_core.commands"):
                continue  # subcommand not shipped in this build
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(func=_unavailable(name, exc))
            continue
        module.register(sub)
    return parser


def _unavailable(name: str, exc: Exception):
    def run(args: argparse.Namespace) -> int:
        raise InferixError(f"'inferix {name}' needs a package that is not installed: {exc}")

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.debug else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InferixError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
