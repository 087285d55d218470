"""The text encoder's cost row (text/cost.py) against closed forms, and the planner through it equal to the old
`other_bytes` path; each test names the mutant it kills."""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig
from inferix_core.cache.planner import allocator_headroom_bytes, plan_memory, plan_resident_blocks
from inferix_core.errors import CacheBudgetError
from inferix_core.memory import PlanInput
from inferix_core.models.wan.config import WanConfig
from inferix_core.text.cost import TextEncoderCost, text_encoder_bytes
from inferix_core.vae.memory import DECODE_SLICINGS

GIVEN = PlanInput(60, 104, 3, 21)
CFG = WanConfig(dim=64, ffn_dim=128, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=6)
CACHE = KVCacheConfig(window_frames=-1, sink_frames=0)


def test_the_rows_are_device_offload_cpu_with_the_file_s_bytes(tmp_path):
    """umT5-XXL in bf16: 5.68e9 parameters × 2 bytes; device keeps them, offload holds them only while encoding
    (alone), cpu nothing. Kills: offload as kept, offload not `alone`, the rows in another order."""
    b = 5_680_000_000 * 2
    rows = TextEncoderCost(b).options(GIVEN)
    assert [(r.option, r.kept_bytes, r.transient_bytes, r.alone) for r in rows] == [
        ("device", b, 0, False),
        ("offload", 0, b, True),
        ("cpu", 0, 0, False),
    ]
    path = tmp_path / "umt5.safetensors"
    with open(path, "wb") as f:
        f.truncate(12345)
    assert text_encoder_bytes(str(path)) == 12345 and text_encoder_bytes(None) == 0


@pytest.mark.parametrize("placement", ["cpu", "offload"])
def test_a_placement_off_the_device_costs_nothing_and_stays(placement):
    """As the loader always counted it: kills counting an asked 'offload' (or 'cpu') on the device."""
    rows = TextEncoderCost(10**9, placement).options(GIVEN)
    assert [(r.option, r.kept_bytes, r.transient_bytes) for r in rows] == [(placement, 0, 0)]


def _smallest():
    return plan_memory(
        CFG, 60, 104, CACHE, dtype=torch.float32, max_frames=21, resident_blocks=0, decode_slicing=DECODE_SLICINGS[-1]
    )


def test_the_text_row_plans_as_other_bytes_when_it_fits():
    """A card that holds everything + a 1 MiB encoder: the same blocks and plan as `other_bytes`, placed 'device'.
    Kills the row counted as anything but its bytes (the resident count would differ)."""
    kw = dict(dtype=torch.float32, max_frames=21)
    budget = 2 * _smallest().total_bytes
    old = plan_resident_blocks(CFG, budget, 60, 104, CACHE, other_bytes=2**20, **kw)
    new = plan_resident_blocks(CFG, budget, 60, 104, CACHE, text=TextEncoderCost(2**20), **kw)
    assert new[0] == old[0] and new[1].to_dict() == old[1].to_dict() and new[1].text_placement == "device"


def test_a_text_encoder_that_leaves_no_plan_gives_way_last():
    """The smallest plan + 4 KiB (+ the allocator's share): a 8 KiB encoder cannot stay (no plan); the plan is
    the one without it (as `other_bytes=0`), and 'offload' (kept + 8 KiB ≤ usable: 8 KiB < the decode's
    transient); an encoder of (usable − kept + 1) bytes: 'cpu'; with no room even without it: the refusal of
    the asked one. Kills the blocks chosen beside the offloaded encoder, and 'offload' when it does not fit."""
    from inferix_core.cache.planner import ALLOCATOR_HEADROOM_FRACTION

    smallest = _smallest()
    budget = int((smallest.total_bytes + 4096) / (1 - ALLOCATOR_HEADROOM_FRACTION)) + 2
    usable = budget - allocator_headroom_bytes(budget)
    kept = smallest.weights_bytes + smallest.requested_cache.device_bytes + smallest.vae_kept_bytes
    kw = dict(dtype=torch.float32, max_frames=21)
    alone, plan = plan_resident_blocks(CFG, budget, 60, 104, CACHE, **kw)
    resident, small = plan_resident_blocks(CFG, budget, 60, 104, CACHE, text=TextEncoderCost(8192), **kw)
    assert (resident, small.to_dict()) == (alone, plan.to_dict()) and small.text_placement == "offload"
    large = plan_resident_blocks(CFG, budget, 60, 104, CACHE, text=TextEncoderCost(usable - kept + 1), **kw)[1]
    assert large.text_placement == "cpu"
    with pytest.raises(CacheBudgetError, match=r"text_encoder_placement='offload' \(frees 0\.0 MiB\)"):
        plan_resident_blocks(CFG, smallest.total_bytes - 1, 60, 104, CACHE, text=TextEncoderCost(8192), **kw)
