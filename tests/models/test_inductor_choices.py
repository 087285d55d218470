"""PersistentRowReductions: Inductor writes the 1,536-wide row norms as persistent (one-read) kernels, same math."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from inferix_core.models.wan.inductor_choices import PersistentRowReductions, persistent_row_reductions


def adaln(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """A Wan block's LayerNorm + modulation: fp32 statistics, bf16 out."""
    return torch.addcmul(shift, F.layer_norm(x.float(), x.shape[-1:]), 1 + scale).to(torch.bfloat16)


def reference(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    norm = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-5)
    return norm * (1 + scale.double()) + shift.double()


def test_the_handler_is_restored():
    from torch._inductor.virtualized import V

    before = V.choices
    with persistent_row_reductions(4096):
        assert isinstance(V.choices, PersistentRowReductions) and V.choices.limit == 4096
    assert V.choices is before


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (Triton kernels)")
def test_rows_of_1536_become_persistent_and_match():
    torch.manual_seed(0)
    x = torch.randn(4680, 1536, device="cuda", dtype=torch.bfloat16)
    scale, shift = (0.1 * torch.randn(1536, device="cuda") for _ in range(2))
    codes = {}
    outs = {}
    for name, ctx in (("default", None), ("persistent", persistent_row_reductions)):
        torch._dynamo.reset()
        fn = torch.compile(adaln, dynamic=False, options={"fx_graph_cache": False})
        if ctx is None:
            outs[name], code = run_and_get_code(fn, x, scale, shift)
        else:
            with ctx():
                outs[name], code = run_and_get_code(fn, x, scale, shift)
        codes[name] = "\n".join(code)
    assert "persistent_reduction" not in codes["default"]  # Inductor's own choice: looped above 1,024
    assert "persistent_reduction" in codes["persistent"]
    ref = reference(x, scale, shift)
    for name, out in outs.items():
        assert torch.isfinite(out).all(), name
        err = (out.double() - ref).abs().max().item()
        assert err < 0.05, (name, err)  # bf16 output of O(4) values: a few ulps
    torch.testing.assert_close(outs["persistent"].float(), outs["default"].float(), rtol=0, atol=0.04)


def _tiny_model(dim: int = 64, device: str = "cpu"):
    from inferix_core.models.wan.causal_transformer import CausalWanTransformer
    from inferix_core.models.wan.config import WanConfig

    cfg = WanConfig(dim=dim, ffn_dim=2 * dim, freq_dim=32, text_dim=32, text_len=8, num_heads=dim // 64 or 1,
                    num_layers=1)  # fmt: skip
    return CausalWanTransformer(cfg).to(device).eval()


def _inputs(model, device: str = "cpu", dtype=torch.float32):
    cfg = model.config
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, cfg.in_dim, 2, 4, 6, generator=g).to(device, dtype)
    t = torch.full((1, 2), 500.0, device=device)
    ctx = torch.randn(1, cfg.text_len, cfg.text_dim, generator=g).to(device, dtype)
    return x, t, ctx


def test_compile_blocks_sets_the_choices_and_every_call_enters_them(monkeypatch):
    from inferix_core.models.wan import causal_transformer as ct
    from inferix_core.models.wan.inductor_choices import persistent_row_reductions

    model = _tiny_model()
    entered = []

    class Recording:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(model.blocks[0], "compile", lambda **kw: None)  # wiring only: no compile on the CPU
    ct.compile_blocks(model)
    assert model.compile_choices is persistent_row_reductions
    ct.compile_blocks(model, persistent_rows=False)
    assert model.compile_choices is None
    model.compile_choices = Recording
    with torch.no_grad():
        out = model(*_inputs(model))
        out2 = model(*_inputs(model))
    assert len(entered) == 2 and torch.isfinite(out).all()
    model.compile_choices = None
    with torch.no_grad():
        torch.testing.assert_close(model(*_inputs(model)), out2, rtol=0, atol=0)  # the context changes no math


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (Triton kernels)")
def test_a_compiled_1536_wide_model_gets_persistent_norms_and_the_same_output():
    from inferix_core.models.wan import inductor_choices
    from inferix_core.models.wan.causal_transformer import compile_blocks

    outs = {}
    for rows in (False, True):
        torch._dynamo.reset()
        inductor_choices.DECISIONS.clear()
        torch.manual_seed(0)  # the same weights both times
        model = _tiny_model(1536, "cuda").to(torch.bfloat16)
        compile_blocks(model, persistent_rows=rows)
        with torch.no_grad():
            outs[rows] = model(*_inputs(model, "cuda", torch.bfloat16)).float()
        persistent = {(h, n) for (h, n, chosen) in inductor_choices.DECISIONS if chosen}
        assert (("INNER", "1536") in persistent) == rows, inductor_choices.DECISIONS
    assert torch.isfinite(outs[True]).all()
    rel = ((outs[True] - outs[False]).norm() / outs[False].norm()).item()
    assert rel < 1e-2, rel  # the same math; bf16 roundings of another summation order
