"""bench/inductor_choices.py: Inductor writes the 1,536-wide row norms as persistent (one-read) kernels, same math."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from bench.inductor_choices import PersistentRowReductions, persistent_row_reductions


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
    with persistent_row_reductions(4096, ("INNER", "DEFAULT")):
        assert isinstance(V.choices, PersistentRowReductions) and V.choices.limit == 4096
        assert {h.name for h in V.choices.hints} == {"INNER", "DEFAULT"}
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
