"""`torchrun ... -m inferix_core.parallel <inferix command>`: the `inferix` CLI, once per rank.

Why a launcher beside the CLI: three things must happen before the CLI loads anything. (1) The process
group and this rank's GPU (`cuda:LOCAL_RANK`) are set first, so every `device="cuda"` later — model,
VAE, text encoder, caches — lands on this rank's GPU. (2) Only rank 0 produces outputs: the other ranks
run the same workflow (the model needs every rank in every step) but print nothing, log only warnings
and write their files into a throw-away folder (`--output-dir` / `--json` pointed at a temporary
directory): null sinks without touching the nodes. (3) The whole command runs inside `fail_together`,
so an error on any rank stops every rank with that rank's message instead of a collective timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable

import torch.distributed as dist

from .distributed import fail_together, get_rank, init_distributed, is_distributed

log = logging.getLogger(__name__)

DEVICE_ENV = "INFERIX_PARALLEL_DEVICE"  # "cpu" forces gloo on CPU on a machine that has GPUs
_REDIRECTED = ("--output-dir", "--json")  # options whose paths rank > 0 must not share with rank 0


def rank_argv(argv: list[str], rank: int, scratch: str) -> list[str]:
    """The CLI arguments for `rank`: unchanged on rank 0; quiet, progress-free, outputs to `scratch` elsewhere."""
    if rank == 0:
        return list(argv)
    out = ["-q"]
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _REDIRECTED:
            skip = "=" not in arg and i + 1 < len(argv)
            out.append(f"{name}={os.path.join(scratch, name.strip('-'))}")
            continue
        out.append(arg)
    if out[1:2] == ["run"]:
        out += ["--no-progress", f"--output-dir={os.path.join(scratch, 'output-dir')}"]
    return out


class _ErrorTee:
    """stderr that also remembers the CLI's last "error: ..." line, to tell the other ranks."""

    def __init__(self, stream):
        self.stream, self.last_error = stream, ""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("error: "):
                self.last_error = line[len("error: ") :]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def main(cli_main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Run `cli_main(<argv>)` (the `inferix` CLI) on this rank (see the module docstring).

    The CLI is passed in by the entry points (`python -m inferix_core` / `-m inferix_core.parallel`), so this
    layer below the CLI never imports it.
    """
    argv = sys.argv[1:] if argv is None else argv
    init_distributed(os.environ.get(DEVICE_ENV))
    rank = get_rank()
    with tempfile.TemporaryDirectory(prefix=f"inferix-rank{rank}-") as scratch:
        args = rank_argv(argv, rank, scratch)
        quiet = open(os.devnull, "w") if rank else None  # noqa: SIM115 (closed below)
        tee = _ErrorTee(sys.stderr)
        try:
            with (
                fail_together(),
                contextlib.redirect_stderr(tee),
                contextlib.redirect_stdout(quiet) if quiet else contextlib.nullcontext(),
            ):
                code = cli_main(args)
                if code:  # the CLI turned an error into a printed line and an exit code: make it everyone's
                    raise RuntimeError(tee.last_error or f"inferix exited with code {code}")
        except RuntimeError as exc:
            if str(exc) == tee.last_error or str(exc).startswith("inferix exited"):
                return code  # already printed by the CLI on this rank
            raise
        finally:
            if quiet is not None:
                quiet.close()
    if is_distributed():
        dist.barrier()
        dist.destroy_process_group()
    return code
