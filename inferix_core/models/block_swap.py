"""Transformer weight offload (block swap): keep N blocks on the device, stream the rest from host memory.

Why: a 14B causal Wan has ~28 GB of bf16 block weights, more than most ComfyUI users' GPUs hold. The
blocks run one after another, so only the block being computed needs its weights on the device. Here
the first `resident` blocks stay on the device; every other block's weights live in pinned host
memory and are copied into one of two device staging slots on a side stream, one block ahead, so the
copy of block i+1 overlaps the compute of block i (as WanVideoWrapper's block swap and ComfyUI's
dynamic offload do). The arithmetic is untouched: the same weights reach the same kernels, so the
output is bitwise the output of the fully resident model.

Ordering, per swapped block i using slot s = i mod 2 (device streams: `compute`, `copy`):

    copy:    wait(slot_free[s]) -> copy host[i] -> slot[s] -> record(ready[i])
    compute: wait(ready[i]) -> block i -> record(slot_free[s])

The copy into a slot waits until the block that used it last has finished, so a slot is never
overwritten while a kernel still reads it. On the CPU (no streams) the copies are plain and
synchronous: the same code path runs, which is what the CPU tests check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlockSwapPlan:
    """How many blocks stay resident, and what that costs and saves on the device."""

    num_blocks: int
    resident_blocks: int
    block_bytes: int  # device bytes of one block's weights and buffers

    @property
    def swapped_blocks(self) -> int:
        return self.num_blocks - self.resident_blocks

    @property
    def device_bytes(self) -> int:
        """Block weights on the device: the resident blocks plus two staging slots when any swap."""
        slots = min(2, self.swapped_blocks)
        return (self.resident_blocks + slots) * self.block_bytes

    @property
    def host_bytes(self) -> int:
        """Pinned host memory holding the swapped blocks."""
        return self.swapped_blocks * self.block_bytes


def block_bytes(block: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(block))


def resident_blocks_for_budget(num_blocks: int, one_block_bytes: int, budget_bytes: int) -> int:
    """The most resident blocks whose weights (plus two staging slots if any block swaps) fit the budget.

    Raises ConfigError when not even the two staging slots fit.
    """
    if num_blocks * one_block_bytes <= budget_bytes:
        return num_blocks
    resident = budget_bytes // one_block_bytes - 2
    if resident < 0:
        raise ConfigError(
            f"block weights need at least {2 * one_block_bytes / 2**30:.2f} GiB on the device for two staging slots "
            f"but the budget is {budget_bytes / 2**30:.2f} GiB; free GPU memory or use fp8 weights"
        )
    return int(min(resident, num_blocks - 1))


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [t for _, t in _named_tensors(module)]


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers, in a fixed order (the staging slots are laid out by it)."""
    return list(module.named_parameters(recurse=True)) + list(module.named_buffers(recurse=True))


def _set_tensor(module: nn.Module, name: str, value: torch.Tensor) -> None:
    owner_name, _, leaf = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    if leaf in owner._parameters:
        owner._parameters[leaf].data = value
    else:
        owner._buffers[leaf] = value


class BlockSwap:
    """Installs forward hooks on `blocks` so that all but the first `resident` stream their weights.

    `blocks` must hold modules of one structure (the blocks of one transformer). Call `remove()` to
    take the hooks off and put every block back on the device.
    """

    def __init__(self, blocks: nn.ModuleList, resident: int, device: torch.device | str):
        n = len(blocks)
        if not 0 <= resident <= n:
            raise ConfigError(f"resident_blocks must be between 0 and {n} (the model's block count), got {resident}")
        self.device = torch.device(device)
        self.blocks = blocks
        self.resident = resident
        self.swapped = list(range(resident, n))
        self.plan = BlockSwapPlan(n, resident, block_bytes(blocks[0]) if n else 0)
        self._handles: list = []
        if not self.swapped:
            return
        self._cuda = self.device.type == "cuda"
        layout = [(name, t.shape, t.dtype) for name, t in _named_tensors(blocks[self.swapped[0]])]
        for i in self.swapped:
            if [(name, t.shape, t.dtype) for name, t in _named_tensors(blocks[i])] != layout:
                raise ConfigError(f"block {i} differs in structure from block {self.swapped[0]}; cannot swap it")
        pin = self._cuda and torch.cuda.is_available()
        # host copies of the swapped blocks (pinned on CUDA so that copies are asynchronous DMA)
        self._host = [[self._to_host(t, pin) for _, t in _named_tensors(blocks[i])] for i in self.swapped]
        self._names = [name for name, _, _ in layout]
        # two device staging slots
        self._slots = [[torch.empty(shape, dtype=dt, device=self.device) for _, shape, dt in layout] for _ in range(2)]
        for i in self.swapped:  # drop the device copies: from here on a swapped block points into a slot
            for name, t in zip(self._names, self._slots[0], strict=True):
                _set_tensor(blocks[i], name, t)
        if self._cuda:
            self._copy_stream = torch.cuda.Stream(self.device)
            self._ready = [torch.cuda.Event() for _ in self.swapped]
            self._slot_free = [torch.cuda.Event() for _ in range(2)]
        self._order = {block_index: k for k, block_index in enumerate(self.swapped)}
        self._prefetched: int | None = None
        self._wrapped: list[tuple[nn.Module, str]] = []
        for k, i in enumerate(self.swapped):
            self._handles.append(blocks[i].register_forward_pre_hook(self._before))
            self._handles.append(blocks[i].register_forward_hook(self._after))
            cross = getattr(blocks[i], "cross_attn", None)
            for method in ("context_kv", "image_kv"):  # prompt K/V, and a Wan I2V start image's
                if cross is not None and hasattr(cross, method):
                    self._wrap_outside_forward(k, cross, method)
        self._prefetch(0)
        log.info(
            "block swap: %d of %d blocks resident, %d streamed from %s host memory (%.2f GiB on the device, "
            "%.2f GiB on the host)",
            resident,
            n,
            len(self.swapped),
            "pinned" if pin else "pageable",
            self.plan.device_bytes / 2**30,
            self.plan.host_bytes / 2**30,
        )

    @staticmethod
    def _to_host(t: torch.Tensor, pin: bool) -> torch.Tensor:
        host = t.detach().to("cpu", copy=True)
        return host.pin_memory() if pin else host

    # -- the copy side ---------------------------------------------------------------------------------
    def _prefetch(self, k: int) -> None:
        """Start copying swapped block number k (in run order) into its slot."""
        slot = self._slots[k % 2]
        host = self._host[k]
        if self._cuda:
            with torch.cuda.stream(self._copy_stream):
                self._copy_stream.wait_event(self._slot_free[k % 2])
                for dst, src in zip(slot, host, strict=True):
                    dst.copy_(src, non_blocking=True)
                self._ready[k].record(self._copy_stream)
        else:
            for dst, src in zip(slot, host, strict=True):
                dst.copy_(src)
        self._prefetched = k

    # -- the compute side ------------------------------------------------------------------------------
    def _acquire(self, k: int) -> None:
        """Make swapped block number k's weights usable by the compute stream."""
        if self._prefetched != k:  # blocks ran out of order (or a run was cut short): fetch this one now
            log.debug("block swap: block %d was not prefetched; copying it now", self.swapped[k])
            self._prefetch(k)
        if self._cuda:
            torch.cuda.current_stream(self.device).wait_event(self._ready[k])
        module = self.blocks[self.swapped[k]]
        for name, t in zip(self._names, self._slots[k % 2], strict=True):
            _set_tensor(module, name, t)

    def _release(self, k: int) -> None:
        """Block k's kernels are queued: free its slot once they ran, and start the next copy."""
        if self._cuda:
            self._slot_free[k % 2].record(torch.cuda.current_stream(self.device))
        self._prefetch((k + 1) % len(self.swapped))  # the next swapped block, wrapping to the next call

    def _before(self, module: nn.Module, args):
        self._acquire(self._order[self._index_of(module)])

    def _after(self, module: nn.Module, args, output):
        self._release(self._order[self._index_of(module)])

    def _wrap_outside_forward(self, k: int, owner: nn.Module, method: str) -> None:
        """Weights read outside the block's forward (the cross-attention K/V of a prompt) load first too."""
        original = getattr(owner, method)

        def loaded(*args, **kwargs):
            self._acquire(k)
            try:
                return original(*args, **kwargs)
            finally:
                self._release(k)

        setattr(owner, method, loaded)
        self._wrapped.append((owner, method))

    def _index_of(self, module: nn.Module) -> int:
        for i in self.swapped:
            if self.blocks[i] is module:
                return i
        raise RuntimeError("block swap hook called for a block it does not manage")

    def remove(self) -> None:
        """Take the hooks off and give every swapped block its own device weights again."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for owner, method in getattr(self, "_wrapped", []):
            delattr(owner, method)  # the instance attribute goes; the class method shows through again
        self._wrapped = []
        if self._cuda:
            torch.cuda.synchronize(self.device)
        for k, i in enumerate(getattr(self, "swapped", [])):
            if not hasattr(self, "_host"):
                break
            for name, src in zip(self._names, self._host[k], strict=True):
                _set_tensor(self.blocks[i], name, src.to(self.device, copy=True))
        self.swapped = []


def enable_block_swap(model: nn.Module, resident_blocks: int, device: torch.device | str | None = None) -> BlockSwap:
    """Stream all but the first `resident_blocks` of `model.blocks` from host memory (see module doc).

    The model's other weights stay where they are. The returned handle is also kept on the model as
    `model.block_swap` (one per model; enabling again replaces the old one).
    """
    old = getattr(model, "block_swap", None)
    if old is not None:
        old.remove()
    if device is None:
        device = next(model.parameters()).device
    swap = BlockSwap(model.blocks, resident_blocks, device)
    model.block_swap = swap
    return swap
