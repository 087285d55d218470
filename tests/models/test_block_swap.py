"""Block swap (transformer weight offload): bitwise the same results as the resident model.

The fixtures' pipeline runs with every resident-block count; a deeper random model checks that slots
are reused across many blocks and across calls; the budget rule is checked against its closed form.
"""

from __future__ import annotations

import copy

import pytest
import torch

from inferix_core.errors import CacheBudgetError, ConfigError
from inferix_core.models.block_swap import BlockSwap, block_bytes, enable_block_swap, resident_blocks_for_budget
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline
from tests.fixture_utils import fixture_request
from tests.models.wan_state import random_wan_state_dict
from tests.pipeline.test_parity import FILES, build


def _run_fixture(path, model, sampling, cache_cfg, t, p):
    pipe = BlockDiffusionPipeline(model, sampling, cache_cfg)
    req = fixture_request(p, t)
    return torch.cat([b.latents for b in pipe.stream(req)], dim=1)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_swapped_pipeline_equals_resident_bitwise(path):
    info, t, model, sampling, cache_cfg = build(path)
    p = info["pipeline"]
    reference = _run_fixture(path, model, sampling, cache_cfg, t, p)
    torch.testing.assert_close(reference, t["output_latents"], atol=1e-4, rtol=0)
    for resident in range(len(model.blocks)):
        swapped_model = copy.deepcopy(model)
        enable_block_swap(swapped_model, resident)
        out = _run_fixture(path, swapped_model, sampling, cache_cfg, t, p)
        assert torch.equal(out, reference), f"resident={resident}"


def _deep_model(num_layers=5):
    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=16, text_len=8, num_heads=2, num_layers=num_layers)
    model = CausalWanTransformer(cfg)
    model.load_state_dict(random_wan_state_dict(cfg, seed=3))
    return cfg, model.eval()


def test_many_blocks_share_two_slots_across_calls():
    cfg, model = _deep_model()
    swapped = copy.deepcopy(model)
    swap = enable_block_swap(swapped, 1)
    assert swap.swapped == [1, 2, 3, 4]
    g = torch.Generator().manual_seed(0)
    ctx = torch.randn(1, cfg.text_len, cfg.text_dim, generator=g)
    for call in range(3):  # several calls: the prefetch wraps from the last swapped block to the first
        x = torch.randn(1, cfg.in_dim, 2, 4, 6, generator=g)
        ts = torch.rand(1, 2, generator=g) * 1000
        with torch.no_grad():
            assert torch.equal(swapped(x, ts, ctx), model(x, ts, ctx)), f"call {call}"
    # the swapped blocks point into the two slots, not into copies of their own
    ptrs = {swapped.blocks[i].ffn[0].weight.data_ptr() for i in swap.swapped}
    assert len(ptrs) <= 2


def test_remove_restores_own_weights():
    _, model = _deep_model(4)
    swapped = copy.deepcopy(model)
    swap = enable_block_swap(swapped, 2)
    swap.remove()
    for a, b in zip(swapped.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    ptrs = {swapped.blocks[i].ffn[0].weight.data_ptr() for i in range(4)}
    assert len(ptrs) == 4


def test_plan_and_budget_closed_form():
    _, model = _deep_model(6)
    one = block_bytes(model.blocks[0])
    assert one == sum(p.numel() * 4 for p in model.blocks[0].parameters())
    swap = BlockSwap(model.blocks, 2, "cpu")
    assert swap.plan.device_bytes == (2 + 2) * one
    assert swap.plan.host_bytes == 4 * one
    assert resident_blocks_for_budget(6, one, 6 * one) == 6
    assert resident_blocks_for_budget(6, one, 5 * one) == 3  # 3 resident + 2 slots
    assert resident_blocks_for_budget(6, one, 2 * one) == 0
    with pytest.raises(ConfigError, match="staging slots"):
        resident_blocks_for_budget(6, one, 2 * one - 1)


def test_bad_resident_count_is_an_error():
    _, model = _deep_model(3)
    with pytest.raises(ConfigError, match="between 0 and 3"):
        BlockSwap(model.blocks, 4, "cpu")


@pytest.mark.parametrize("fp8", [False, True])
def test_load_world_model_with_resident_blocks_generates_the_same_video(tmp_path, fp8):
    from inferix_core.api import generate_video
    from inferix_core.models.registry import load_world_model
    from inferix_core.models.wan.checkpoint import save_wan_checkpoint
    from tests.fixture_utils import FIXTURES

    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=4)
    path = tmp_path / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(cfg, seed=5), path, layout="comfyui", config=cfg)
    vae = str(FIXTURES / "wan_vae_tiny.safetensors")
    resident = load_world_model(str(path), vae_path=vae, device="cpu", fp8=fp8)
    swapped = load_world_model(str(path), vae_path=vae, device="cpu", fp8=fp8, resident_blocks=1)
    assert "block swap: 1 of 4 blocks resident" in swapped.describe()
    ctx = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    a = generate_video(resident, ctx, num_blocks=2, width=48, height=32, seed=0)
    b = generate_video(swapped, ctx, num_blocks=2, width=48, height=32, seed=0)
    assert torch.isfinite(a.latents).all()
    assert torch.equal(a.latents, b.latents)


def test_block_parameter_formula_matches_the_module():
    from inferix_core.cache.planner import transformer_weight_bytes

    for qk, cross in [(True, True), (False, False)]:
        cfg = WanConfig(dim=32, ffn_dim=48, freq_dim=16, text_dim=16, text_len=8, num_heads=2, num_layers=3,
                        qk_norm=qk, cross_attn_norm=cross)  # fmt: skip
        model = CausalWanTransformer(cfg)
        assert cfg.block_parameters() == sum(p.numel() for p in model.blocks[0].parameters())
        total = sum(p.numel() for p in model.parameters())
        assert transformer_weight_bytes(cfg, 2) == total * 2 == cfg.num_parameters() * 2
        # one resident + two slots = every block of a 3-block model; zero resident = two blocks on the device
        assert transformer_weight_bytes(cfg, 2, 1) == total * 2
        assert transformer_weight_bytes(cfg, 2, 0) == (total - cfg.block_parameters()) * 2


def test_planner_counts_only_resident_blocks_and_slots():
    from inferix_core.cache import KVCacheConfig, plan_memory

    cfg = WanConfig(num_layers=40, dim=5120, ffn_dim=13824, num_heads=40)  # the 14B shape
    full = plan_memory(cfg, 60, 104, KVCacheConfig(window_frames=6), max_frames=21)
    swap = plan_memory(cfg, 60, 104, KVCacheConfig(window_frames=6), max_frames=21, resident_blocks=20)
    assert full.weights_bytes - swap.weights_bytes == 18 * cfg.block_parameters() * 2


def test_plan_resident_blocks_fills_the_budget_and_names_a_fix():
    from inferix_core.cache import KVCacheConfig
    from inferix_core.cache.planner import allocator_headroom_bytes, plan_memory, plan_resident_blocks
    from inferix_core.errors import CacheBudgetError

    cfg = WanConfig(num_layers=40, dim=5120, ffn_dim=13824, num_heads=40)
    cache = KVCacheConfig(window_frames=6)
    card = 24 * 2**30
    usable = card - allocator_headroom_bytes(card)  # the allocator's share stays unplanned
    resident, plan = plan_resident_blocks(cfg, card, 60, 104, cache, max_frames=21, vae_bytes=0)
    assert 0 < resident < 40 and plan.total_bytes <= usable
    nxt = plan_memory(cfg, 60, 104, cache, max_frames=21, vae_bytes=0, resident_blocks=resident + 1)
    assert nxt.total_bytes > usable
    full, _ = plan_resident_blocks(cfg, 200 * 2**30, 60, 104, cache, max_frames=21, vae_bytes=0)
    assert full == 40
    with pytest.raises(CacheBudgetError, match="fp8_weights=True"):
        plan_resident_blocks(cfg, 4 * 2**30, 60, 104, cache, max_frames=21, vae_bytes=0, other_bytes=2**30)


def test_fp8_block_weight_bytes_match_a_quantized_model():
    from inferix_core.cache.planner import transformer_weight_bytes
    from inferix_core.models.fp8 import quantize_linears_fp8

    cfg = WanConfig(dim=32, ffn_dim=64, freq_dim=16, text_dim=16, text_len=8, num_heads=2, num_layers=3)
    model = CausalWanTransformer(cfg).to(torch.bfloat16)
    quantize_linears_fp8(model, weight_only=True)
    actual = sum(t.nbytes for t in [*model.parameters(), *model.buffers()])
    scales = sum(b.nbytes for n, b in model.named_buffers() if n.endswith("weight_scale"))
    assert transformer_weight_bytes(cfg, 2, fp8_block_weights=True) == actual - scales


def test_load_world_model_plans_block_swap_from_gpu_memory(tmp_path):
    from inferix_core.cache.planner import plan_resident_blocks
    from inferix_core.models.registry import get_family, load_world_model
    from inferix_core.models.wan.checkpoint import save_wan_checkpoint

    cfg = WanConfig(dim=64, ffn_dim=128, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=6)
    path = tmp_path / "model.safetensors"
    save_wan_checkpoint(random_wan_state_dict(cfg, seed=5), path, layout="comfyui", config=cfg)
    fam = get_family("self_forcing")
    # a budget that holds the run with exactly 3 resident blocks (per the planner's own sums at 480x832)
    full, _ = plan_resident_blocks(cfg, 2**40, 60, 104, fam.cache, dtype=torch.float32, max_frames=21)
    assert full == 6
    from inferix_core.cache.planner import ALLOCATOR_HEADROOM_FRACTION, plan_memory
    from inferix_core.vae.memory import DECODE_SLICINGS

    smallest = DECODE_SLICINGS[-1]  # the planner makes the decode smaller before it streams blocks
    need = plan_memory(
        cfg, 60, 104, fam.cache, dtype=torch.float32, max_frames=21, resident_blocks=3, decode_slicing=smallest
    ).total_bytes
    budget = int(need / (1 - ALLOCATOR_HEADROOM_FRACTION)) + 2  # the plan plus the allocator's headroom
    wm = load_world_model(str(path), device="cpu", gpu_memory=budget)
    assert wm.transformer.block_swap.resident == 3
    from inferix_core.errors import CacheBudgetError

    with pytest.raises(CacheBudgetError, match="more than the budget"):
        load_world_model(str(path), device="cpu", gpu_memory=2**20)


def test_bundled_model_takes_the_memory_levers_too():
    from inferix_core.models.fp8 import count_fp8_linears
    from inferix_core.models.registry import load_world_model

    wm = load_world_model("bundled", device="cpu", resident_blocks=0, fp8_weights=True)
    assert wm.transformer.block_swap.resident == 0
    assert count_fp8_linears(wm.transformer, weight_only=True) > 0


def test_a_text_encoder_that_leaves_no_plan_moves_off_the_gpu(tmp_path):
    """Resident umT5 would leave no plan even with every block streamed: 'offload' when it fits beside what the
    run keeps on the GPU for an encode, else 'cpu'; a placement that fits is kept."""
    from inferix_core.cache.planner import plan_memory
    from inferix_core.models.registry import get_family, planned_resident_blocks
    from inferix_core.vae.memory import DECODE_SLICINGS

    cfg = WanConfig(dim=64, ffn_dim=128, freq_dim=16, text_dim=8, text_len=4, num_heads=2, num_layers=6)
    fam = get_family("self_forcing")
    smallest = plan_memory(
        cfg,
        60,
        104,
        fam.cache,
        dtype=torch.float32,
        max_frames=21,
        resident_blocks=0,
        decode_slicing=DECODE_SLICINGS[-1],
    )
    from inferix_core.cache.planner import ALLOCATOR_HEADROOM_FRACTION, allocator_headroom_bytes

    budget = int((smallest.total_bytes + 4096) / (1 - ALLOCATOR_HEADROOM_FRACTION)) + 2  # + the allocator's share
    usable = budget - allocator_headroom_bytes(budget)
    kept = smallest.weights_bytes + smallest.requested_cache.device_bytes + smallest.vae_kept_bytes
    small, large = tmp_path / "small.safetensors", tmp_path / "large.safetensors"
    with open(small, "wb") as f:
        f.truncate(8192)  # more than the 4 KiB left over, less than the decode's transient
    with open(large, "wb") as f:
        f.truncate(usable - kept + 1)  # cannot sit beside what the run keeps either
    args = (cfg, fam, budget, torch.float32, False)
    assert planned_resident_blocks(*args, str(small), "device")[2] == "offload"
    assert planned_resident_blocks(*args, str(large), "device")[2] == "cpu"
    assert planned_resident_blocks(*args, str(small), "cpu")[2] == "cpu"  # nothing to move: kept as asked
    with pytest.raises(CacheBudgetError, match="more than the budget"):
        planned_resident_blocks(cfg, fam, smallest.total_bytes - 1, torch.float32, False, str(small), "device")
