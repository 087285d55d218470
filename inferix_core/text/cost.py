"""The text encoder's cost row for `memory.compose`: its weights on the device, on it only while it encodes, or
on the host (design/one-engine.md §4).

`device` keeps the weights there for the whole run (kept). `offload` brings them for an encode, between blocks:
an `alone` transient, beside the kept bytes only. `cpu` holds no device memory. A placement asked other than
`device` is counted as nothing, as the loader always has (the encoder is off the device while the run denoises).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..memory import Cost, PlanInput

TEXT = "text encoder"
LABELS = {"device": "on the device", "offload": "on the device while it encodes", "cpu": "on the host"}


def text_encoder_bytes(path: str | None) -> int:
    """The encoder's weights as stored (the file's size: its weights load at their stored width); 0 without one."""
    return Path(path).stat().st_size if path else 0


@dataclass(frozen=True)
class TextEncoderCost:
    """Options, fastest first from the placement asked: device (kept), offload (alone transient), cpu (nothing);
    each option's `option` is its placement."""

    weights_bytes: int
    placement: str = "device"
    name: str = TEXT

    def options(self, given: PlanInput) -> Sequence[Cost]:
        if self.placement != "device" or not self.weights_bytes:
            return [
                Cost(
                    self.name,
                    0,
                    0,
                    option=self.placement,
                    label=f"text encoder {LABELS.get(self.placement, self.placement)}",
                )
            ]
        b = self.weights_bytes
        return [
            Cost(self.name, b, 0, option="device", label=f"text encoder {LABELS['device']}"),
            Cost(self.name, 0, b, option="offload", label=f"text encoder {LABELS['offload']}", alone=True),
            Cost(self.name, 0, 0, option="cpu", label=f"text encoder {LABELS['cpu']}"),
        ]
