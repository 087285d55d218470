"""Both real-arithmetic RoPE formulas of compiled blocks are the eager complex rotation."""

from __future__ import annotations

import pytest
import torch

from inferix_core.models.wan import layers
from inferix_core.models.wan.layers import RotaryEmbedding3D, apply_rope


@pytest.mark.parametrize("formula", ["stack", "flip"])
def test_compiled_formula_equals_complex_rotation(monkeypatch, formula):
    torch.manual_seed(3)
    heads, head_dim, frames, h, w = 2, 24, 3, 2, 5
    freqs = RotaryEmbedding3D(head_dim).freqs(torch.arange(7, 7 + frames), h, w, torch.device("cpu"))
    x = torch.randn(2, frames * h * w, heads, head_dim, dtype=torch.float64)
    eager = torch.view_as_real(
        torch.view_as_complex(x.view(*x.shape[:3], -1, 2)) * torch.view_as_complex(freqs.double())
    ).flatten(3)
    monkeypatch.setattr(layers, "COMPILED_ROPE_FORMULA", formula)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # take the compiled branch, uncompiled
    out = apply_rope(x.float(), freqs)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), eager, rtol=0, atol=2e-6)
