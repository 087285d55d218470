"""MemorySettings: how a world model is placed in memory (block swap, fp8 weights, text encoder).

One frozen object for the loader's memory levers, so the node, the CLI and Python pass the same thing
(`workflow.settings.load_options(..., memory=settings)`, or `load_world_model(**settings.load_kwargs())`).
Why these levers: most ComfyUI users have 8–24 GB; the transformer weights (2.6 GB at 1.3B, 28 GB at 14B in
bf16) and umT5-XXL (11 GB) are what does not fit, so they are what moves off the GPU (docs/memory.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

GIB = 1 << 30
TEXT_ENCODER_PLACEMENTS = ("device", "cpu", "offload")


@dataclass(frozen=True)
class MemorySettings:
    gpu_memory_gb: float | None = None  # plan block swap for a card of this size; None = no budget
    resident_blocks: int | None = None  # blocks kept on the GPU by hand (overrides the plan); None = plan / all
    fp8_weights: bool = False  # block linears stored in e4m3, dequantized per call
    text_encoder_placement: str = "device"

    def __post_init__(self) -> None:
        if self.gpu_memory_gb is not None and not self.gpu_memory_gb > 0:
            raise ConfigError(f"gpu_memory_gb must be positive (or None for no budget), got {self.gpu_memory_gb}")
        if self.resident_blocks is not None and self.resident_blocks < 0:
            raise ConfigError(f"resident_blocks must be ≥ 0 (or None), got {self.resident_blocks}")
        if self.text_encoder_placement not in TEXT_ENCODER_PLACEMENTS:
            raise ConfigError(
                f"text_encoder_placement must be one of {', '.join(TEXT_ENCODER_PLACEMENTS)}, "
                f"not '{self.text_encoder_placement}'"
            )

    def load_kwargs(self) -> dict:
        return {
            "gpu_memory": None if self.gpu_memory_gb is None else int(self.gpu_memory_gb * GIB),
            "resident_blocks": self.resident_blocks,
            "fp8_weights": self.fp8_weights,
            "text_encoder_placement": self.text_encoder_placement,
        }


def parse_memory_size(text: str) -> float:
    """'24GB', '24 GiB', '24g', '24' -> 24.0 (GiB); one-line error otherwise."""
    s = text.strip().lower().replace(" ", "")
    for suffix in ("gib", "gb", "g"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
            break
    try:
        value = float(s)
    except ValueError:
        raise ConfigError(f"'{text}' is not a memory size; write it like 24GB") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ConfigError(f"'{text}' is not a positive memory size; write it like 24GB")
    return value
