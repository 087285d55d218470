"""Which KV layers an offloaded cache keeps on the GPU and which it streams from pinned host memory, and the
GPU bytes each choice costs (`offload_layout`, `budget_for_offloaded`); the store itself is in offload.py."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CacheBudgetError
from .paged import planned_pages
from .spec import KVCacheConfig, KVCacheSpec

GiB = 1024**3
STAGING_BUFFERS = 2  # a 3rd adds a layer of lookahead but no bandwidth: when copies are the bottleneck it buys nothing


@dataclass(frozen=True)
class OffloadLayout:
    """Which layers keep their pages on the GPU and which stream them from pinned host memory."""

    offloaded: tuple[int, ...]
    resident: tuple[int, ...]
    layer_bytes: int  # K and V page storage of one layer (the whole planned window)
    num_staging: int  # device buffers (layer_bytes each) the offloaded layers rotate through
    block_bytes: int = 0  # K and V of one block of one layer: the device block buffer of an offloaded layer

    @property
    def num_offloaded(self) -> int:
        return len(self.offloaded)

    @property
    def device_bytes(self) -> int:
        return (len(self.resident) + self.num_staging) * self.layer_bytes + len(self.offloaded) * self.block_bytes

    @property
    def host_bytes(self) -> int:
        return len(self.offloaded) * self.layer_bytes


def _layer_and_block_bytes(config: KVCacheConfig, spec: KVCacheSpec) -> tuple[int, int]:
    frame = spec.page_size_bytes()  # K and V of one frame of one layer
    slots = planned_pages(config, spec) * (config.page_frames or spec.block_frames)
    return slots * frame, spec.block_frames * frame


def _device_bytes(num_layers: int, m: int, layer_bytes: int, block_bytes: int) -> int:
    """GPU bytes with m of num_layers layers offloaded (what OffloadLayout.device_bytes will say)."""
    return (num_layers - m + min(STAGING_BUFFERS, m)) * layer_bytes + m * block_bytes


def offload_layout(config: KVCacheConfig, spec: KVCacheSpec) -> OffloadLayout:
    """Choose the offloaded layers for `config.offload` and `config.gpu_budget_bytes`.

    The fewest layers the budget allows are offloaded: per call every offloaded layer streams its past
    window, so fewer offloaded layers is less PCIe traffic per call and more compute to hide it behind.
    With m of L layers offloaded, layer i is offloaded when ⌊(i+1)·m/L⌋ > ⌊i·m/L⌋, which spreads them
    evenly (L = 6, m = 2: layers 2 and 5), so every transfer has L/m layers of compute to hide behind.
    """
    layer_bytes, block_bytes = _layer_and_block_bytes(config, spec)
    num_layers = spec.num_layers
    budget = config.gpu_budget_bytes
    if config.offload == "off" or (config.offload == "auto" and (budget is None or budget >= num_layers * layer_bytes)):
        m = 0
    elif config.offload == "always" or budget is None:
        m = num_layers
    else:  # fewest offloaded layers m whose resident layers + staging + block buffers fit the budget
        fits = [m for m in range(1, num_layers + 1) if _device_bytes(num_layers, m, layer_bytes, block_bytes) <= budget]
        if not fits:
            need = _device_bytes(num_layers, num_layers, layer_bytes, block_bytes)
            raise CacheBudgetError(
                f"offloaded KV cache needs {need / GiB:.2f} GiB on the GPU even with every layer offloaded "
                f"({min(STAGING_BUFFERS, num_layers)} staging layers of {layer_bytes / GiB:.2f} GiB + {num_layers} "
                f"block buffers of {block_bytes / GiB:.3f} GiB) but gpu_budget_bytes is {budget / GiB:.2f} GiB. "
                "Lower window_frames, set quantization='int8', or raise gpu_budget_bytes."
            )
        m = fits[0]
    offloaded = tuple(i for i in range(num_layers) if (i + 1) * m // num_layers > i * m // num_layers)
    resident = tuple(i for i in range(num_layers) if i not in offloaded)
    return OffloadLayout(offloaded, resident, layer_bytes, min(STAGING_BUFFERS, m), block_bytes if m else 0)


def budget_for_offloaded(config: KVCacheConfig, spec: KVCacheSpec, num_offloaded: int) -> int:
    """The gpu_budget_bytes under which offload="auto" offloads exactly `num_offloaded` layers (≥ 3, or all).

    Device bytes fall by layer_bytes − block_bytes per offloaded layer from the 3rd on (the first two
    offloaded layers only trade places with the two staging buffers), so small m < 3 never pays off.
    """
    layer_bytes, block_bytes = _layer_and_block_bytes(config, spec)
    return _device_bytes(spec.num_layers, num_offloaded, layer_bytes, block_bytes)
