"""One memory plan: every component states its cost from one input record; `compose` chooses in one pass.

A component (transformer weights, KV cache, VAE decoder, text encoder) is a `CostModel`: from a `PlanInput` it
lists its `options` as `Cost` rows, fastest first (the first is what was asked). It never chooses: `compose`
adds the chosen rows up and, over the budget, lets the `give_way` parts step down (design/one-engine.md §4):

- peak = the sum of kept bytes + the largest transient (the sum of the transients when the decode overlaps the
  next block: `PlanInput.decode_overlaps`);
- option 0 of each part; over budget, the `give_way` parts step down in order, each through its options, to the
  first fit (staying at its last, smallest, when none fits); then one pass back up in reverse order, each to its
  fastest option that still fits;
- a part in `last` (a text encoder that gave way) comes last: when the run does not fit with it at its first
  option, the others choose again with it at its last (smallest), then it takes its fastest later option that
  fits (an `alone` option: its transient lives beside the kept bytes alone, e.g. an encoder on the device only
  while it encodes, between blocks); when even that does not fit, the plan is the one with its first option;
- what stays over is refused by `MemoryPlan.check()`, naming the first fitting option of the parts that did not
  give way (`fallbacks`: each part is asked again with `budget_bytes` = the room the others leave it).

Nothing here knows a component; it imports none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..errors import CacheBudgetError


@dataclass(frozen=True)
class PlanInput:
    """What every component's cost is stated from: one run's shape, its budget, where it runs.

    `shared_pages`: a fork parent's pages in use, counted once; `head_shards`: ranks splitting the K/V heads.
    """

    latent_h: int
    latent_w: int
    block_frames: int
    max_frames: int | None
    streams: int = 1
    shared_past_frames: int = 0
    shared_pages: int | None = None
    head_shards: int = 1
    dtype: torch.dtype = torch.bfloat16
    on_cuda: bool = True
    budget_bytes: int | None = None
    decode_overlaps: bool = False


@dataclass(frozen=True)
class Cost:
    """One option of one component: the bytes it holds for the whole run (`kept_bytes`) and the bytes it adds
    while it works (`transient_bytes`: a block call's activations, a block decode). `kept_bytes` < 0: the option
    cannot be built at this size (it never fits). `option` carries what the component runs with. `alone`: the
    transient lives beside the kept bytes alone, never beside another's (an encoder on the device only while it
    encodes a new prompt, between blocks)."""

    component: str
    kept_bytes: int
    transient_bytes: int
    host_bytes: int = 0
    option: object = None
    label: str = ""
    exact: bool = True
    formula: str = ""
    alone: bool = False

    @property
    def possible(self) -> bool:
        return self.kept_bytes >= 0


class CostModel(Protocol):
    name: str

    def options(self, given: PlanInput) -> Sequence[Cost]: ...  # fastest first; the first was asked


@dataclass(frozen=True)
class Fixed:
    """A component of one option (a resident text encoder, memory outside PyTorch's allocator)."""

    name: str
    kept_bytes: int
    transient_bytes: int = 0
    label: str = ""

    def options(self, given: PlanInput) -> Sequence[Cost]:
        return (Cost(self.name, self.kept_bytes, self.transient_bytes, label=self.label),)


def peak_bytes(costs: Sequence[Cost], overlapped: bool) -> int:
    """Sum of kept + the largest transient (their sum when the decode overlaps the next block); an `alone`
    transient is compared with that, never added."""
    transients = [c.transient_bytes for c in costs if not c.alone]
    alone = max((c.transient_bytes for c in costs if c.alone), default=0)
    run = sum(transients) if overlapped else max(transients, default=0)
    return sum(c.kept_bytes for c in costs) + max(run, alone)


@dataclass(frozen=True)
class MemoryPlan:
    """The chosen option of every part (in the parts' order) and, when over budget, what else would fit."""

    given: PlanInput
    costs: tuple[Cost, ...]
    fallbacks: Mapping[str, tuple[tuple[Cost, bool], ...]] = field(default_factory=dict)  # name → (option, fits)

    def cost(self, name: str) -> Cost:
        return next(c for c in self.costs if c.component == name)

    @property
    def kept_bytes(self) -> int:
        return sum(c.kept_bytes for c in self.costs)

    @property
    def transient_bytes(self) -> int:
        return peak_bytes(self.costs, self.given.decode_overlaps) - self.kept_bytes

    @property
    def peak_bytes(self) -> int:
        return peak_bytes(self.costs, self.given.decode_overlaps)

    @property
    def host_bytes(self) -> int:
        return sum(c.host_bytes for c in self.costs)

    @property
    def fits(self) -> bool:
        budget = self.given.budget_bytes
        return budget is None or (all(c.possible for c in self.costs) and self.peak_bytes <= budget)

    def first_fit(self, name: str) -> Cost | None:
        """The first option of a part that did not give way which fits beside the others' chosen ones."""
        return next((c for c, fits in self.fallbacks.get(name, ()) if fits), None)

    def check(self) -> MemoryPlan:
        """This plan when it fits; else CacheBudgetError naming the first fitting option of the rest."""
        if self.fits:
            return self
        fixes = [f"{c.component}: {c.label or c.option}" for name in self.fallbacks if (c := self.first_fit(name))]
        fix = "; fits with " + " or ".join(fixes) if fixes else "; no option of any part fits"
        raise CacheBudgetError(
            f"the run needs {self.peak_bytes} bytes but the budget is {self.given.budget_bytes} bytes{fix}"
        )


def compose(
    given: PlanInput, parts: Sequence[CostModel], give_way: Sequence[str] = (), last: Sequence[str] = ()
) -> MemoryPlan:
    """Choose one option of every part; see the module docstring for the rules."""
    names = [p.name for p in parts]
    options = {p.name: tuple(p.options(given)) for p in parts}
    budget, overlapped = given.budget_bytes, given.decode_overlaps

    def costs(ch: Mapping[str, int], skip: str = "") -> list[Cost]:
        return [options[n][ch[n]] for n in names if n != skip]

    def fits(ch: Mapping[str, int]) -> bool:
        chosen = costs(ch)
        return budget is None or (all(c.possible for c in chosen) and peak_bytes(chosen, overlapped) <= budget)

    def give(choice: dict[str, int]) -> dict[str, int]:
        if fits(choice):
            return choice
        for name in give_way:  # step down, in order, to the first fit
            for i in range(len(options[name])):
                choice[name] = i
                if fits(choice):
                    break
            if fits(choice):
                break
        for name in reversed(give_way):  # back up: each to its fastest option that still fits
            choice[name] = next((i for i in range(len(options[name])) if fits({**choice, name: i})), choice[name])
        return choice

    choice = give(dict.fromkeys(names, 0))
    if last and not fits(choice):  # the last parts at their smallest while the others choose again
        again = give({**dict.fromkeys(names, 0), **{n: len(options[n]) - 1 for n in last}})
        if fits(again):
            for name in last:  # then each to its fastest later option that fits beside the rest
                again[name] = next((i for i in range(1, len(options[name])) if fits({**again, name: i})), again[name])
            choice = again
    fallbacks = {}
    if not fits(choice):
        for part in parts:
            if part.name in give_way or part.name in last:
                continue
            room = budget - peak_bytes(costs(choice, skip=part.name), overlapped)
            asked = tuple(part.options(dataclasses.replace(given, budget_bytes=room)))
            rest = costs(choice, skip=part.name)
            fallbacks[part.name] = tuple(
                (c, c.possible and peak_bytes([*rest, c], overlapped) <= budget) for c in asked[1:]
            )
    return MemoryPlan(given, tuple(costs(choice)), fallbacks)
