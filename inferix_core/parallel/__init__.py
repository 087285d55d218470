"""Multi-GPU / multi-process inference: Ulysses sequence parallelism for the causal transformer.

Launched with torchrun, every rank runs the same program; the transformer's tokens are split across
ranks and attention exchanges them to a split over heads (see sp_transformer.py). docs/parallel.md
has the commands for one machine with several GPUs and for several machines.
"""

from .distributed import (
    fail_together,
    get_rank,
    get_world_size,
    init_distributed,
    is_distributed,
    is_rank_zero,
    launched_world_size,
    local_device,
)
from .sp_transformer import (
    SequenceParallel,
    disable_sequence_parallel,
    enable_sequence_parallel,
    head_shards,
    maybe_enable_sequence_parallel,
)
from .ulysses import SequenceParallelAttention, head_to_seq, seq_to_head

__all__ = [
    "SequenceParallel",
    "SequenceParallelAttention",
    "disable_sequence_parallel",
    "enable_sequence_parallel",
    "fail_together",
    "get_rank",
    "get_world_size",
    "head_shards",
    "head_to_seq",
    "init_distributed",
    "is_distributed",
    "is_rank_zero",
    "launched_world_size",
    "local_device",
    "maybe_enable_sequence_parallel",
    "seq_to_head",
]
