"""compile_boundary: the eager-only steps stay out of compiled graphs, and start-up does not load dynamo."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from inferix_core import compile_boundary as cb
from inferix_core.clients.benchmark import PRESETS
from inferix_core.models.wan.action_module import ActionModule
from inferix_core.models.wan.causal_transformer import CausalWanTransformer, SelfAttention, compile_blocks

_MODULE_SOURCE = """
import torch
from inferix_core.compile_boundary import compile_boundary

@compile_boundary
def step(x, seen):
    seen.append(torch.compiler.is_compiling())
    return x + 1

def call(x, seen):
    return step(x * 2, seen) * 3
"""


def _traced_or_not(where: str, defer: bool, mark: bool, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the boundary's body ran inside a dynamo trace (True) or eagerly (False)."""
    monkeypatch.setattr(cb, "_dynamo_loaded", lambda: not defer)
    monkeypatch.setattr(cb, "_PENDING", [])
    seen: list[bool] = []
    if where == "method":

        class Stepper:
            @cb.compile_boundary
            def step(self, x: torch.Tensor) -> torch.Tensor:
                seen.append(torch.compiler.is_compiling())
                return x + 1

        stepper = Stepper()
        body = lambda x: stepper.step(x * 2) * 3  # noqa: E731
    else:
        module = types.ModuleType("boundary_probe")
        monkeypatch.setitem(sys.modules, module.__name__, module)  # dynamo looks a frame's globals up by module
        exec(_MODULE_SOURCE, module.__dict__)
        body = lambda x: module.call(x, seen)  # noqa: E731
    if mark:
        cb.mark_compile_boundaries()
    torch._dynamo.reset()
    compiled = torch.compile(body, backend="eager")
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    return seen


@pytest.mark.parametrize("where", ["method", "module"])
def test_a_deferred_boundary_runs_eagerly_once_marked(where, monkeypatch):
    assert _traced_or_not(where, defer=True, mark=True, monkeypatch=monkeypatch) == [False]


@pytest.mark.parametrize("where", ["method", "module"])
def test_a_boundary_made_after_dynamo_loaded_is_marked_at_once(where, monkeypatch):
    assert _traced_or_not(where, defer=False, mark=False, monkeypatch=monkeypatch) == [False]


@pytest.mark.parametrize("where", ["method", "module"])
def test_an_unmarked_deferred_boundary_is_traced(where, monkeypatch):
    """The control: without mark_compile_boundaries dynamo traces into the body (what compile_blocks prevents)."""
    assert _traced_or_not(where, defer=True, mark=False, monkeypatch=monkeypatch) == [True]


def test_marking_leaves_no_frame_of_ours_on_the_call_path(monkeypatch):
    """Marked, the class holds the disabled function itself (dynamo guards no wrapper frame per call)."""
    monkeypatch.setattr(cb, "_dynamo_loaded", lambda: False)
    monkeypatch.setattr(cb, "_PENDING", [])

    class Stepper:
        @cb.compile_boundary
        def step(self, x):
            return x

    plain = Stepper.__dict__["step"]
    assert not cb.is_marked(plain) and callable(plain) and not isinstance(plain, cb._DeferredMethod)
    cb.mark_compile_boundaries()
    assert cb.is_marked(Stepper.__dict__["step"]) and Stepper.__dict__["step"]._torchdynamo_orig_callable is plain


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
