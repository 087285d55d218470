"""Which CUDA-graph runner, if any, the block loop replays for a model."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_NOTED: set[str] = set()


def graph_runner(model):
    """The model's CUDA-graph runner (models/wan/cuda_graphs.py), if it has one that runs this very model.

    A copied module (copy.deepcopy) carries its original's runner, which would replay the original's
    weights: such a runner is ignored, with a log line, and the copy runs eagerly.
    """
    runner = getattr(model, "cuda_graphs", None)
    if runner is None:
        return None
    if not runner.runs(model):
        if "graphs_owner" not in _NOTED:
            _NOTED.add("graphs_owner")
            log.warning("this model's cuda_graphs runner belongs to another module (a copy?); running eagerly")
        return None
    return runner
