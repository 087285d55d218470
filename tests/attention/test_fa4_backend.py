"""FlashAttention-4 backend: the per-shape choice from the measured table, and the logged SDPA fallback.

The selection tests run on the CPU with the kernel absent: availability is monkeypatched. The CUDA test
compares the kernel with SDPA when flash-attn-4 is installed (skipped otherwise).
"""

from __future__ import annotations

import logging

import pytest
import torch

from inferix_core.attention import get_attention_backend
from inferix_core.attention import registry as reg

H200 = (9, 0)


@pytest.fixture
def fa4_state(monkeypatch):
    """A clean availability record and log-once set for each test."""
    state: dict = {}
    monkeypatch.setattr(reg, "_FA4", state)
    monkeypatch.setattr(reg, "_NOTED", set())
    return state


def test_absent_kernel_falls_back_to_sdpa_with_a_log_line(fa4_state, monkeypatch, caplog):
    monkeypatch.setattr(reg, "_fa4_importable", lambda: False)
    with caplog.at_level(logging.WARNING, logger="inferix_core.attention.registry"):
        backend = get_attention_backend("flash_attn_4")
    assert backend.name == "sdpa"
    assert any("flash_attn_4" in r.getMessage() and "not available" in r.getMessage() for r in caplog.records)


def test_choice_follows_the_measured_crossover(fa4_state):
    fa4_state.update(available=True, cc=H200)
    row = reg.fa4_crossover(H200, 128)
    assert row is not None and 14_040 < row.min_keys <= 32_760  # equal at 14,040, faster at 32,760 (issue #19)
    bf16 = torch.bfloat16
    assert reg.fa4_choice_for(32_760, 128, bf16, "cuda") is None
    assert reg.fa4_choice_for(row.min_keys, 128, bf16, "cuda") is None
    for keys in (4_680, 14_040, row.min_keys - 1):
        assert reg.fa4_choice_for(keys, 128, bf16, "cuda") == reg.BELOW_CROSSOVER
    assert "measurement" in reg.fa4_choice_for(32_760, 64, bf16, "cuda")  # no row for this head size
    fa4_state["cc"] = (10, 0)
    assert "sm_100" in reg.fa4_choice_for(32_760, 128, bf16, "cuda")  # nor for another GPU
    assert reg.fa4_choice_for(32_760, 128, bf16, "cuda", force=True) is None
    assert "mask" in reg.fa4_choice_for(32_760, 128, bf16, "cuda", masked=True)
    assert "bf16/fp16" in reg.fa4_choice_for(32_760, 128, torch.float32, "cuda")
    assert "CUDA" in reg.fa4_choice_for(32_760, 128, bf16, "cpu")
    fa4_state["available"] = False
    assert "not installed" in reg.fa4_choice_for(32_760, 128, bf16, "cuda")


def _qkv(keys: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 6, 2, 8, generator=g), torch.randn(1, keys, 2, 8, generator=g),
            torch.randn(1, keys, 2, 8, generator=g))  # fmt: skip


def test_dispatch_calls_fa4_only_when_chosen_and_logs_fallbacks_once(fa4_state, monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(reg, "_fa4_call", lambda q, k, v: calls.append(k.shape[1]) or torch.zeros_like(q))
    q, k, v = _qkv(10)
    monkeypatch.setattr(reg, "fa4_choice", lambda q, k, mask=None, force=False: None)
    assert torch.equal(reg._flash4(q, k, v), torch.zeros_like(q)) and calls == [10]
    monkeypatch.setattr(reg, "fa4_choice", lambda q, k, mask=None, force=False: reg.BELOW_CROSSOVER)
    with caplog.at_level(logging.WARNING, logger="inferix_core.attention.registry"):
        torch.testing.assert_close(reg._flash4(q, k, v), reg._sdpa(q, k, v), atol=0, rtol=0)
    assert calls == [10] and not caplog.records  # the table's choice is not a fallback
    monkeypatch.setattr(reg, "fa4_choice", lambda q, k, mask=None, force=False: "FA4 runs bf16/fp16 on CUDA only")
    with caplog.at_level(logging.WARNING, logger="inferix_core.attention.registry"):
        for _ in range(3):
            torch.testing.assert_close(reg._flash4(q, k, v), reg._sdpa(q, k, v), atol=0, rtol=0)
            reg._flash4_force(q, k, v)
    assert calls == [10] and len(caplog.records) == 1 and "using sdpa" in caplog.records[0].getMessage()


def test_real_choice_on_cpu_tensors_is_sdpa(fa4_state):
    fa4_state.update(available=True, cc=H200)
    q, k, v = _qkv(7)
    assert "CUDA" in reg.fa4_choice(q, k)
    torch.testing.assert_close(reg._flash4(q, k, v), reg._sdpa(q, k, v), atol=0, rtol=0)


@pytest.mark.cuda
def test_fa4_matches_sdpa_on_the_gpu():
    if not reg._fa4_available():
        pytest.skip("flash-attn-4 is not installed or this GPU has no FA4 kernels")
    torch.manual_seed(0)
    for keys in (4_680, 32_760):  # below and above the H200 crossover
        q = torch.randn(1, 4_680, 12, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, keys, 12, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, keys, 12, 128, device="cuda", dtype=torch.bfloat16)
        ref = reg._sdpa(q.float(), k.float(), v.float())
        fa4 = reg._fa4_call(q, k, v)
        assert fa4.shape == q.shape and torch.isfinite(fa4).all()
        sdpa_err = (reg._sdpa(q, k, v).float() - ref).abs().max().item()
        fa4_err = (fa4.float() - ref).abs().max().item()
        assert fa4_err < max(4 * sdpa_err, 2e-3), (keys, fa4_err, sdpa_err)  # issue #19: 2e-4…1e-3 vs SDPA
        chosen = get_attention_backend("flash_attn_4").attend(q, k, v)
        torch.testing.assert_close(chosen.float(), ref, atol=max(4 * sdpa_err, 2e-3), rtol=0)


def test_auto_is_sdpa_without_the_kernel_and_says_so_once(fa4_state, monkeypatch, caplog):
    monkeypatch.setattr(reg, "_fa4_importable", lambda: False)
    with caplog.at_level(logging.INFO, logger="inferix_core.attention.registry"):
        first, second = get_attention_backend("auto"), get_attention_backend()
    assert first.name == second.name == "sdpa"
    assert [r.getMessage() for r in caplog.records if "'auto'" in r.getMessage()] == [
        "attention 'auto': sdpa (flash-attn-4 is not installed here)"
    ]


def test_auto_is_flash_attn_4_where_it_imports_on_a_gpu_it_has_kernels_for(fa4_state):
    fa4_state.update(available=True, cc=H200)
    assert get_attention_backend("auto").name == "flash_attn_4"
    assert reg.attention_backends()[0] == "auto"


def test_loaders_default_to_auto():
    """The loader, the state-dict loader, the benchmark and the nodes all default to "auto", so the benchmark
    measures what users get."""
    import inspect

    from inferix_core.clients.benchmark import BenchConfig
    from inferix_core.models.registry import LoadOptions
    from inferix_core.models.state_dict import world_model_from_state_dict

    assert LoadOptions().attention == "auto"  # load_world_model's settings
    assert inspect.signature(world_model_from_state_dict).parameters["attention"].default == "auto"
    assert BenchConfig().attention == "auto"
