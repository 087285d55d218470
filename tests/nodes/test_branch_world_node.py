"""Inferix Branch World headless on the tiny fixture model (CPU): futures side by side and the kept one."""

from __future__ import annotations

import pytest
import torch

from inferix_core.errors import ConfigError
from tests.nodes.test_node_execution import FixtureConditioning, tiny_workflow


def _workflow(futures: str, keep: int) -> dict:
    wf = {k: v for k, v in tiny_workflow().items() if k in ("1", "2", "3")}
    wf["9"] = {
        "class_type": "InferixBranchWorld",
        "inputs": {
            "world_model": ["1", 0],
            "conditioning": ["2", 0],
            "kv_cache": ["3", 0],
            "past_prompt": "",
            "futures": futures,
            "past_blocks": 2,
            "future_blocks": 1,
            "width": 96,
            "height": 64,
            "seed": 4,
            "keep": keep,
        },
    }
    return wf


@pytest.mark.slow  # loads the fixture model and decodes 3 videos (~30 s on a shared 2-core machine)
def test_branch_world_node_runs_headless(node_classes, models_dir, output_dir):
    from inferix_core.workflow import execute

    classes = {**node_classes, "FixtureConditioning": FixtureConditioning}
    result = execute(_workflow("=\n=", keep=1), classes, output_dir=output_dir, progress=False)
    side, chosen, info = result.outputs["9"]
    assert side.dtype == torch.float32 and side.shape[1:] == (64, 2 * 96, 3)
    assert chosen.shape[1:] == (64, 96, 3) and chosen.shape[0] > side.shape[0]  # past + the kept future
    # the right half of the side-by-side is the kept future: the tail of `chosen`
    assert torch.equal(side[:, :, 96:], chosen[-side.shape[0] :])
    assert not torch.equal(side[:, :, :96], side[:, :, 96:])  # two seeds, two futures
    assert "2 futures" in info and "shared" in info


def test_branch_world_refuses_bad_futures_and_keep(node_classes):
    node = node_classes["InferixBranchWorld"]
    assert "at least one line" in node.validate_inputs(futures="\n  \n")
    assert node.validate_inputs(futures="=\na road at night") is True
    with pytest.raises(ConfigError, match="keep=2"):  # keep against the futures: checked when it runs
        node.execute(world_model=None, past_prompt="", futures="=\na road at night", past_blocks=1, future_blocks=1,
                     width=96, height=96, seed=0, keep=2)  # fmt: skip
