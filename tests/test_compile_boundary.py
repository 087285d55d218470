"""compile_boundary: the eager-only steps stay out of compiled graphs, and start-up does not load dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from inferix_core import compile_boundary as cb
from inferix_core.benchmark import PRESETS
from inferix_core.models.wan.action_module import ActionModule
from inferix_core.models.wan.causal_transformer import CausalWanTransformer, SelfAttention, compile_blocks


def _traced_or_not(defer: bool, monkeypatch: pytest.MonkeyPatch, mark: bool) -> list[bool]:
    """Whether the boundary's body ran inside a dynamo trace (True) or eagerly (False)."""
    monkeypatch.setattr(cb, "_dynamo_loaded", lambda: not defer)
    monkeypatch.setattr(cb, "_PENDING", [])
    seen: list[bool] = []

    @cb.compile_boundary
    def step(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.compiler.is_compiling())
        return x + 1

    if mark:
        cb.mark_compile_boundaries()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: step(x * 2) * 3, backend="eager")
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    return seen


def test_a_deferred_boundary_runs_eagerly_once_marked(monkeypatch):
    assert _traced_or_not(defer=True, monkeypatch=monkeypatch, mark=True) == [False]


def test_a_boundary_made_after_dynamo_loaded_is_marked_at_once(monkeypatch):
    assert _traced_or_not(defer=False, monkeypatch=monkeypatch, mark=False) == [False]


def test_an_unmarked_deferred_boundary_is_traced(monkeypatch):
    """The control: without mark_compile_boundaries dynamo traces into the body (what compile_blocks prevents)."""
    assert _traced_or_not(defer=True, monkeypatch=monkeypatch, mark=False) == [True]


def test_compile_blocks_keeps_the_kv_cache_steps_eager():
    compile_blocks(CausalWanTransformer(PRESETS["tiny"]["config"]))
    assert cb.is_marked(SelfAttention.attend_cached)
    assert cb.is_marked(ActionModule.attend_cached)


def test_the_cli_and_the_engine_import_without_dynamo():
    """`torch._dynamo` costs ~1.7 s of start-up; only compiling needs it."""
    code = (
        "import sys; from inferix_core import cli, pipeline, api; cli.build_parser();"
        "import inferix_core.models.registry, inferix_core.models.wan.action_module;"
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr
