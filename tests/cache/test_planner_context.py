"""The planner's non-PyTorch term (CUDA context + library workspaces) and its row-band rung of the VAE decode.

`non_torch_bytes` is what a real card holds outside PyTorch's allocator: measured on CUDA as total − free −
reserved, at least `NON_TORCH_DEFAULT_BYTES` when planning for a card size the user gave, 0 on the CPU. It
enters the budget like any other term and the plan names it. Row bands are the smallest decode rungs: the
planner reaches them only when one latent frame per call does not fit, and takes the fewest bands that do.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.cache import KVCacheConfig, plan_memory, planner
from inferix_core.cache.planner import (
    NON_TORCH_DEFAULT_BYTES,
    measured_non_torch_bytes,
    plan_resident_blocks,
    planned_non_torch_bytes,
)
from inferix_core.errors import CacheBudgetError
from inferix_core.models.wan.config import WanConfig
from inferix_core.vae.config import VAEDecodeOptions
from inferix_core.vae.cost import estimated_memory
from inferix_core.vae.memory import DECODE_SLICINGS, VAEMemory

GiB = 2**30
WAN_1_3B = WanConfig()  # dim 1536, 30 layers
CACHE = KVCacheConfig(window_frames=12, sink_frames=3)
LAT_H, LAT_W = 60, 104


def _vae() -> VAEMemory:
    return estimated_memory(LAT_H, LAT_W, 1, 2, options=VAEDecodeOptions.fast(), cuda=True)


def test_cpu_has_no_non_torch_term():
    assert measured_non_torch_bytes("cpu") == 0
    assert planned_non_torch_bytes("cpu", 8 * GiB) == 0


def test_cuda_term_is_measured_and_at_least_the_default_for_a_given_card(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (100 * GiB, 140 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 39 * GiB + GiB // 2)
    assert measured_non_torch_bytes("cuda") == GiB // 2  # total − free − reserved
    assert planned_non_torch_bytes("cuda") == GiB // 2  # no card size: what is there now
    assert planned_non_torch_bytes("cuda", 8 * GiB) == NON_TORCH_DEFAULT_BYTES  # workspaces come later
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 38 * GiB)
    assert planned_non_torch_bytes("cuda", 8 * GiB) == 2 * GiB  # measured more (other processes): that
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert planned_non_torch_bytes("cuda", 8 * GiB) == NON_TORCH_DEFAULT_BYTES  # planning a card from a CPU host


def test_the_term_enters_the_budget_and_the_plan_names_it():
    base = plan_memory(WAN_1_3B, LAT_H, LAT_W, CACHE, vae_memory=_vae(), decode_slicing=DECODE_SLICINGS[2])
    ctx = plan_memory(
        WAN_1_3B, LAT_H, LAT_W, CACHE, vae_memory=_vae(), decode_slicing=DECODE_SLICINGS[2],
        non_torch_bytes=NON_TORCH_DEFAULT_BYTES,
    )  # fmt: skip
    assert ctx.total_bytes == base.total_bytes + NON_TORCH_DEFAULT_BYTES
    assert ctx.torch_bytes == base.torch_bytes == base.total_bytes
    assert "CUDA context" in ctx.describe() and "CUDA context" not in base.describe()
    assert ctx.to_dict()["non_torch_bytes"] == NON_TORCH_DEFAULT_BYTES
    # a budget the plan fits without the term: with it, the KV cache no longer fits as requested
    budget = base.total_bytes + NON_TORCH_DEFAULT_BYTES // 2
    args = dict(vae_memory=_vae(), decode_slicing=DECODE_SLICINGS[2], budget_bytes=budget)
    assert plan_memory(WAN_1_3B, LAT_H, LAT_W, CACHE, **args).message == ""
    assert plan_memory(WAN_1_3B, LAT_H, LAT_W, CACHE, non_torch_bytes=NON_TORCH_DEFAULT_BYTES, **args).message


def test_block_swap_keeps_fewer_blocks_for_the_context_and_says_so_when_nothing_fits():
    kw = dict(vae_memory=_vae())
    without, _ = plan_resident_blocks(WAN_1_3B, 8 * GiB, LAT_H, LAT_W, CACHE, **kw)
    with_ctx, plan = plan_resident_blocks(WAN_1_3B, 8 * GiB, LAT_H, LAT_W, CACHE, non_torch_bytes=GiB, **kw)
    assert with_ctx < without
    assert plan.total_bytes <= 8 * GiB - planner.allocator_headroom_bytes(8 * GiB)
    with pytest.raises(CacheBudgetError, match="CUDA context"):
        plan_resident_blocks(WAN_1_3B, 6 * GiB, LAT_H, LAT_W, CACHE, non_torch_bytes=GiB, **kw)


def test_row_bands_are_the_rung_after_one_latent_frame_per_call():
    vae = _vae()
    rungs = vae.slicings
    one_frame = rungs.index(dataclasses.replace(rungs[0], latent_frames_per_step=1, release_previous_state=True))
    banded = [s.row_bands for s in rungs[one_frame + 1 :]]
    assert banded and banded == sorted(banded) and banded[0] > 1  # fewest bands (fastest) first
    transients = [vae.decode(3, s).transient_bytes for s in rungs[one_frame:]]
    assert transients == sorted(transients, reverse=True)  # each rung needs less
    # a budget between one frame per call and 2 bands: the planner takes the bands, and names them
    kw = dict(vae_memory=vae, resident_blocks=10)
    sizes = [plan_memory(WAN_1_3B, LAT_H, LAT_W, CACHE, decode_slicing=s, **kw).total_bytes for s in rungs]
    budget = (sizes[one_frame] + sizes[one_frame + 1]) // 2
    plan = plan_memory(WAN_1_3B, LAT_H, LAT_W, CACHE, budget_bytes=budget, **kw)
    assert plan.decode.slicing == rungs[one_frame + 1] and plan.message == ""
    assert f"{rungs[one_frame + 1].row_bands} row bands" in plan.describe()


@pytest.mark.cuda
def test_cuda_measures_the_context():
    torch.zeros(1, device="cuda")  # a context exists
    measured = measured_non_torch_bytes("cuda")
    assert 0 < measured < torch.cuda.get_device_properties(0).total_memory
