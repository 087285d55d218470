"""The transformer's row of the memory plan (models/cost.py `TransformerCost`) against the weights written out by
hand from the config: every parameter of a tiny Wan transformer counted here, not by `WanConfig.block_parameters`
/ `num_parameters` nor `plan_costs.transformer_weight_bytes`. The hand count is itself checked against the module
built on `meta`. Each test names the mutant it kills."""

from __future__ import annotations

import pytest
import torch

from inferix_core.cache import KVCacheConfig, plan_memory
from inferix_core.cache.plan_costs import kv_spec
from inferix_core.memory import PlanInput
from inferix_core.models.cost import TRANSFORMER, TransformerCost
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig

D, F, L, TEXT, FREQ, LATENT = 64, 192, 4, 32, 16, 16  # dim, ffn, layers, text width, timestep features, channels
CFG = WanConfig(dim=D, ffn_dim=F, freq_dim=FREQ, text_dim=TEXT, text_len=8, num_heads=4, num_layers=L)
PATCH = 1 * 2 * 2  # (t, h, w) of the patch embedding

ATTENTION = 4 * (D * D + D) + 2 * D  # q, k, v, o with biases; RMSNorm weights of q and k
BLOCK = 2 * ATTENTION + 2 * D + (D * F + F + F * D + D) + 6 * D  # self + cross attention, norm3, ffn, modulation
LINEAR = 2 * 4 * D * D + 2 * D * F  # the block linears' weights (what fp8 stores at one byte each)
OTHER = (
    (LATENT * PATCH * D + D)  # patch embedding
    + (TEXT * D + D + D * D + D)  # text embedding
    + (FREQ * D + D + D * D + D)  # time embedding
    + (D * 6 * D + 6 * D)  # time projection
    + (D * LATENT * PATCH + LATENT * PATCH + 2 * D)  # head and its modulation
)

LATENT_H, LATENT_W, BLOCK_FRAMES, MAX_FRAMES = 8, 8, 2, 6
CACHE = KVCacheConfig(window_frames=4)


def row(dtype: torch.dtype, resident=(None,), fp8: bool = False) -> TransformerCost:
    spec = kv_spec(CFG, LATENT_H, LATENT_W, BLOCK_FRAMES, 1, dtype, MAX_FRAMES)
    return TransformerCost(CFG, spec, CACHE, torch.finfo(dtype).bits // 8, tuple(resident), fp8)


def given(dtype: torch.dtype) -> PlanInput:
    return PlanInput(LATENT_H, LATENT_W, BLOCK_FRAMES, MAX_FRAMES, dtype=dtype)


def test_the_hand_count_is_the_module():
    """The closed form above is the transformer's: its parameters, and one block's, built on `meta`."""
    with torch.device("meta"):
        model = CausalWanTransformer(CFG)
    assert sum(p.numel() for p in model.parameters()) == OTHER + L * BLOCK
    assert sum(p.numel() for p in model.blocks[0].parameters()) == BLOCK


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_block_resident_is_layers_times_block_params_times_element_bytes(dtype):
    """Kept: (non-block params + layers × per-layer params) × element bytes. Kills a layer dropped from the count,
    the element size taken from the wrong place, or the row answering for another resident count."""
    elem = torch.finfo(dtype).bits // 8
    (cost,) = row(dtype).options(given(dtype))
    assert cost.component == TRANSFORMER and cost.option is None
    assert cost.kept_bytes == (OTHER + L * BLOCK) * elem


def test_block_swap_keeps_the_resident_blocks_and_two_staging_slots():
    """Resident r of L blocks: r + 2 staging slots on the device, at most L; most first. Kills the slots not
    counted, or counted past the number of layers."""
    costs = row(torch.bfloat16, (None, 3, 2, 1, 0)).options(given(torch.bfloat16))
    assert [c.option for c in costs] == [None, 3, 2, 1, 0]
    assert [c.kept_bytes for c in costs] == [(OTHER + n * BLOCK) * 2 for n in (L, L, L, 3, 2)]


def test_fp8_block_linears_are_one_byte_each():
    """With fp8 block weights the block linears' weights take one byte, the rest of the block and the other
    weights their element size. Kills fp8 applied to the biases or the embeddings, or not at all."""
    (cost,) = row(torch.bfloat16, fp8=True).options(given(torch.bfloat16))
    assert cost.kept_bytes == OTHER * 2 + L * ((BLOCK - LINEAR) * 2 + LINEAR)


def test_the_planner_reports_the_config_s_row():
    """`plan_memory` composes the row the config states (`WanConfig.cost_row`): its weights are the closed form,
    its activations one block call's, `elem·(8·n·dim + 2·n·ffn + 2·span·dim) + 16·n·dim` for n query tokens
    against a span of keys (docs/memory.md). Kills the planner composing another row than the config's."""
    tokens = (LATENT_H // 2) * (LATENT_W // 2)
    n, span = BLOCK_FRAMES * tokens, CACHE.window_frames * tokens
    acts = 2 * (8 * n * D + 2 * n * F + 2 * span * D) + 16 * n * D
    spec = kv_spec(CFG, LATENT_H, LATENT_W, BLOCK_FRAMES, 1, torch.bfloat16, MAX_FRAMES)
    assert CFG.cost_row(spec, CACHE, 2) == row(torch.bfloat16)
    plan = plan_memory(CFG, LATENT_H, LATENT_W, CACHE, block_frames=BLOCK_FRAMES, max_frames=MAX_FRAMES, vae_bytes=0)
    assert (plan.weights_bytes, plan.activation_bytes) == ((OTHER + L * BLOCK) * 2, acts)
