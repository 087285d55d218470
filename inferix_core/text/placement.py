"""Where the text encoder lives: on the device, on the CPU, or on the device only while it encodes.

Why: umT5-XXL is 11 GB in bf16, as much as a 24 GB card's whole share for the world model, and it
runs once per new prompt (the `PromptCache` serves repeats). So on small cards it should not sit on
the GPU: `cpu` runs it on the host (seconds per prompt, no GPU memory), `offload` keeps it on the host
and moves it to the device only for the encode call, then moves it back and frees the device memory
(a ~0.5 s copy per new prompt on PCIe 4, the GPU's speed for the encode itself). `device` keeps it
resident (fastest prompt switches). The embedding always comes back on `output_device`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal, Protocol

import torch

from ..errors import ConfigError

log = logging.getLogger(__name__)

Placement = Literal["device", "cpu", "offload"]
PLACEMENTS: tuple[str, ...] = ("device", "cpu", "offload")


class TextEncoder(Protocol):
    model: torch.nn.Module

    @property
    def device(self) -> torch.device: ...

    def encode(self, prompts: Sequence[str]) -> torch.Tensor: ...


class PlacedTextEncoder:
    """A text encoder run where `placement` says, returning embeddings on `output_device`."""

    def __init__(self, encoder: TextEncoder, placement: str, output_device: torch.device | str):
        if placement not in PLACEMENTS:
            raise ConfigError(f"text encoder placement '{placement}' is not one of {', '.join(PLACEMENTS)}")
        self.encoder = encoder
        self.placement = placement
        self.output_device = torch.device(output_device)
        home = self.output_device if placement == "device" else torch.device("cpu")
        encoder.model.to(home)

    @property
    def model(self) -> torch.nn.Module:
        return self.encoder.model

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    @torch.no_grad()
    def encode(self, prompts: Sequence[str]) -> torch.Tensor:
        if self.placement != "offload" or self.output_device.type == "cpu":
            return self.encoder.encode(prompts).to(self.output_device)
        self.encoder.model.to(self.output_device)
        try:
            return self.encoder.encode(prompts)
        finally:
            self.encoder.model.to("cpu")
            if self.output_device.type == "cuda":
                torch.cuda.empty_cache()  # give the encoder's device memory back to the world model
            log.debug(
                "text encoder: encoded %d prompt(s) on %s and moved back to the CPU", len(prompts), self.output_device
            )

    def resident_bytes(self) -> int:
        """Device bytes the encoder holds between calls (0 unless placement is 'device')."""
        if self.placement != "device":
            return 0
        return sum(p.nbytes for p in self.encoder.model.parameters())
