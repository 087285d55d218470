"""Process-group set-up from the torchrun environment, rank helpers, and failing together.

Every rank runs the same program on the same inputs (same seed, same prompt), so the ranks stay in
lock-step and only the transformer's attention talks across them (see `ulysses.py`). This module owns
the few things that must be decided once per process: which backend (NCCL on CUDA, gloo on CPU), which
GPU is this rank's (`cuda:LOCAL_RANK`, set before anything is allocated), and what happens when one
rank fails while the others wait inside a collective (they would hang until the NCCL/gloo timeout):
`fail_together` publishes the error in the rendezvous store and every other rank stops with it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from ..errors import ConfigError

log = logging.getLogger(__name__)

ERROR_KEY = "inferix/error"
FAIL_EXIT_CODE = 1  # exit code of a rank stopped because another rank failed


def launched_world_size() -> int:
    """World size torchrun (or a test harness) put in the environment; 1 for a plain process."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise ConfigError(f"WORLD_SIZE is '{os.environ['WORLD_SIZE']}'; expected an integer") from exc


def local_rank() -> int:
    """This process's index on its machine (torchrun's LOCAL_RANK); picks the GPU."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_distributed() -> bool:
    """True once a process group exists (several ranks cooperate)."""
    return dist.is_available() and dist.is_initialized()


def get_rank(group: dist.ProcessGroup | None = None) -> int:
    return dist.get_rank(group) if is_distributed() else 0


def get_world_size(group: dist.ProcessGroup | None = None) -> int:
    return dist.get_world_size(group) if is_distributed() else 1


def is_rank_zero() -> bool:
    """Rank 0 is the one that writes outputs, streams frames and reports profiles."""
    return get_rank() == 0


def local_device(device: str | torch.device | None = None) -> torch.device:
    """This rank's compute device: `cuda:LOCAL_RANK` for CUDA (or when CUDA is there and nothing is asked), else CPU."""
    kind = torch.device(device).type if device is not None and str(device) != "auto" else None
    if kind == "cpu" or (kind is None and not torch.cuda.is_available()):
        return torch.device("cpu")
    if kind not in (None, "cuda"):
        return torch.device(device)
    if not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use device='cpu'")
    return torch.device("cuda", local_rank() % torch.cuda.device_count())


def init_distributed(device: str | torch.device | None = None, timeout_s: float = 600.0) -> int:
    """Create the default process group from the torchrun environment; return the world size.

    Idempotent, and a no-op (returns 1) for a plain single process. NCCL is used when this rank computes
    on CUDA, gloo otherwise. The CUDA device is set to `cuda:LOCAL_RANK` *before* the group exists, so
    that `device="cuda"` everywhere later (model loading, noise, caches) lands on this rank's GPU.
    """
    if is_distributed():
        return dist.get_world_size()
    world = launched_world_size()
    if world <= 1:
        return 1
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    dev = local_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        backend = "nccl"
        if os.environ.get("NCCL_NVLS_ENABLE") is None:
            log.debug("NCCL_NVLS_ENABLE is unset; docs/parallel.md recommends NCCL_NVLS_ENABLE=0")
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    log.info("rank %d/%d up (%s on %s)", dist.get_rank(), world, backend, dev)
    return world


def _default_store():
    """The rendezvous key-value store of the default group, or None (private torch API, so guarded)."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:  # any failure just means: no cross-rank error channel
        return None


_generation = 0  # fail_together blocks entered so far (the same on every rank: ranks run in lock-step)


@contextmanager
def fail_together(poll_s: float = 0.5) -> Iterator[None]:
    """Run a block so that an exception on any rank stops every rank with that rank's message.

    Why: a rank that raises leaves the others blocked in their next all-to-all, which only ends at the
    collective timeout (10 minutes) with an unhelpful NCCL/gloo error. Here the failing rank writes
    "rank R: <error>" to the rendezvous store before re-raising; a watchdog thread on every rank polls
    the store and, on seeing another rank's error, logs it and exits the process at once (a thread
    cannot interrupt a blocking collective, so exiting is the only reliable stop). On one process this
    is a no-op.
    """
    global _generation
    store = _default_store() if is_distributed() else None
    if store is None:
        yield
        return
    _generation += 1
    key = f"{ERROR_KEY}/{_generation}"
    rank = dist.get_rank()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(poll_s):
            try:
                if not store.check([key]):
                    continue
                message = store.get(key).decode()
            except Exception:  # store gone: the job is ending anyway
                return
            if stop.is_set() or message.startswith(f"rank {rank}:"):
                return
            log.error("stopping: %s", message)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os._exit(FAIL_EXIT_CODE)

    watchdog = threading.Thread(target=watch, name="inferix-fail-together", daemon=True)
    watchdog.start()
    try:
        yield
    except BaseException as exc:
        stop.set()
        try:
            store.compare_set(key, "", f"rank {rank}: {type(exc).__name__}: {exc}")
        except Exception:
            log.debug("could not publish the error to the other ranks", exc_info=True)
        raise
    finally:
        stop.set()
