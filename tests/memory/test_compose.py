"""`memory.compose`'s rules against closed forms, one test a rule; each names the mutant of plan.py it kills."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from inferix_core.errors import CacheBudgetError
from inferix_core.memory import Cost, Fixed, PlanInput, compose

GIVEN = PlanInput(latent_h=60, latent_w=104, block_frames=3, max_frames=21)


@dataclass(frozen=True)
class Rows:
    """A part whose options are (kept, transient) pairs, fastest first; it records the budget it was asked with."""

    name: str
    rows: tuple[tuple[int, int], ...]

    def options(self, given):
        return [Cost(self.name, k, t, option=i, label=f"{self.name}#{i}") for i, (k, t) in enumerate(self.rows)]


def with_budget(budget, overlapped=False):
    return PlanInput(60, 104, 3, 21, budget_bytes=budget, decode_overlaps=overlapped)


def test_peak_is_the_kept_sum_plus_the_largest_transient():
    """Kills `max(transients)` → `sum(transients)` (and → `min`) in `peak_bytes` without overlap."""
    plan = compose(GIVEN, [Rows("a", ((10, 7),)), Rows("b", ((20, 3),)), Fixed("c", 5, 4)])
    assert plan.peak_bytes == 10 + 20 + 5 + 7
    assert plan.kept_bytes == 35 and plan.transient_bytes == 7


def test_an_overlapped_decode_adds_the_transients():
    """Kills dropping `decode_overlaps` (the sum becomes the max)."""
    plan = compose(with_budget(None, overlapped=True), [Rows("a", ((10, 7),)), Rows("b", ((20, 3),))])
    assert plan.peak_bytes == 10 + 20 + 7 + 3


def test_option_zero_is_kept_when_it_fits():
    """Kills stepping down although the plan fits (a give-way part must stay at what was asked)."""
    plan = compose(with_budget(100), [Rows("a", ((50, 0), (10, 0))), Rows("b", ((40, 0),))], give_way=("a",))
    assert [c.option for c in plan.costs] == [0, 0] and plan.fits


def test_give_way_steps_down_in_order_then_back_up():
    """Budget 100, b kept 40: a steps first, to its first fit beside d_0 (30 + 40 + 30 = 100: a_2); back up in
    reverse order: d (a at 2) stays at its fastest d_0, a (d at 0) at a_2.
    Kills: no back-up pass, back-up in forward order, stepping on after the first fit."""
    b = Rows("b", ((40, 0),))
    plan = compose(
        with_budget(100), [Rows("a", ((60, 0), (50, 0), (30, 0))), b, Rows("d", ((30, 0), (5, 0)))], ("a", "d")
    )
    assert [c.option for c in plan.costs] == [2, 0, 0] and plan.peak_bytes == 100
    # a's smallest (30) does not fit beside d_0 (30) when b is 45: d steps down to 5 (30 + 45 + 5 = 80), then
    # a climbs back: its fastest beside d_1 is 50 (50 + 45 + 5 = 100), not 60 (110)
    b2 = Rows("b", ((45, 0),))
    plan = compose(
        with_budget(100), [Rows("a", ((60, 0), (50, 0), (30, 0))), b2, Rows("d", ((30, 0), (5, 0)))], ("a", "d")
    )
    assert [c.option for c in plan.costs] == [1, 0, 1] and plan.peak_bytes == 100


def test_a_part_that_never_fits_stays_at_its_smallest():
    """Kills resetting a give-way part to its option 0 when none of its options fits."""
    plan = compose(with_budget(10), [Rows("a", ((60, 0), (50, 0), (30, 0)))], give_way=("a",))
    assert plan.costs[0].option == 2 and not plan.fits


def test_budget_refusal_names_the_first_fitting_option_of_the_rest():
    """kv (not giving way) is over: its fallbacks are asked with the room the others leave (100 − 60 − 5 = 35),
    and the refusal names the first that fits (kv#2, 30), not the first listed (kv#1, 40) nor the smallest.
    Kills: fallbacks checked without the others' transient, `asked[1:]` → `asked`, the room not passed."""
    seen = []

    @dataclass(frozen=True)
    class KV:
        name: str = "kv"

        def options(self, given):
            seen.append(given.budget_bytes)
            return [Cost("kv", k, 0, label=f"kv#{i}") for i, k in enumerate((70, 40, 30, 10))]

    plan = compose(with_budget(100), [Rows("w", ((60, 5),)), KV()])
    assert not plan.fits and seen == [100, 35]
    assert [(c.label, ok) for c, ok in plan.fallbacks["kv"]] == [("kv#1", False), ("kv#2", True), ("kv#3", True)]
    assert plan.first_fit("kv").label == "kv#2"
    with pytest.raises(CacheBudgetError, match="fits with kv: kv#2"):
        plan.check()


def test_an_impossible_option_never_fits():
    """Kills ignoring `Cost.possible` (a negative size would look small)."""
    plan = compose(with_budget(100), [Rows("a", ((-1, 0), (90, 0)))], give_way=("a",))
    assert plan.costs[0].option == 1 and plan.fits


def test_the_back_up_pass_runs_in_reverse_order():
    """a, b, c give way (10 each when small, 30 / 30 / 100 when fast), budget 50: down, a and b end small and c
    fits small (30); back up in reverse order b climbs first (10 + 30 + 10 = 50), leaving a small: (1, 0, 1).
    Kills the back-up pass in forward order, which gives a the room instead: (0, 1, 1)."""
    parts = [Rows("a", ((30, 0), (10, 0))), Rows("b", ((30, 0), (10, 0))), Rows("c", ((100, 0), (10, 0)))]
    plan = compose(with_budget(50), parts, give_way=("a", "b", "c"))
    assert [c.option for c in plan.costs] == [1, 0, 1] and plan.peak_bytes == 50


def test_an_alone_transient_is_compared_with_the_run_s_not_added():
    """An encoder on the device only while it encodes (between blocks) lives beside the kept bytes alone: peak =
    kept + max(the run's transient, it). Overlapped run transients 7 + 3 = 10: an alone 5 adds nothing, an alone
    12 is the peak's transient. Kills adding an alone transient to the overlapped sum (15, 22)."""
    rows = [Rows("a", ((10, 7),)), Rows("b", ((20, 3),))]
    small = compose(with_budget(None, True), [*rows, AloneRow("t", 0, 5)])
    large = compose(with_budget(None, True), [*rows, AloneRow("t", 0, 12)])
    assert small.peak_bytes == 30 + 10 and large.peak_bytes == 30 + 12


@dataclass(frozen=True)
class AloneRow:
    """One `alone` option."""

    name: str
    kept: int
    transient: int

    def options(self, given):
        return [Cost(self.name, self.kept, self.transient, alone=True)]


@dataclass(frozen=True)
class Encoder:
    """device (kept b), offload (alone transient b), cpu (nothing): the text encoder's shape of options."""

    b: int
    name: str = "text"

    def options(self, given):
        return [
            Cost(self.name, self.b, 0, option="device"),
            Cost(self.name, 0, self.b, option="offload", alone=True),
            Cost(self.name, 0, 0, option="cpu"),
        ]


BLOCKS = Rows("t", ((50, 10), (40, 10), (30, 10)))  # resident blocks, most first; activations 10


def test_a_text_encoder_that_gave_way_comes_last():
    """Budget 75, encoder 40: with it on the device nothing fits (30 + 40 + 10 = 80); the blocks choose again with
    it off (every block: 50 + 10 = 60), then it takes 'offload' only if 50 + 40 fits: no, so 'cpu'.
    Kills giving way with the others (it would take 'offload' and the blocks drop to 30: 30 + 40 = 70)."""
    plan = compose(with_budget(75), [BLOCKS, Encoder(40)], give_way=("t",), last=("text",))
    assert [c.option for c in plan.costs] == [0, "cpu"] and plan.peak_bytes == 60 and plan.fits


def test_offload_when_it_fits_beside_the_kept_sum_alone():
    """One block option (50, activations 40), encoder 30, budget 95: on the device 120; off, 90; offload
    50 + max(40, 30) = 90 fits. Kills skipping 'offload' (straight to 'cpu') and counting it with the
    activations (50 + 40 + 30 = 120, over)."""
    plan = compose(with_budget(95), [Rows("t", ((50, 40),)), Encoder(30)], give_way=("t",), last=("text",))
    assert [c.option for c in plan.costs] == [0, "offload"] and plan.peak_bytes == 90


def test_an_encoder_that_fits_stays_and_one_that_cannot_help_leaves_the_refusal():
    """Budget 75, encoder 20: 40 blocks + 20 + 10 = 70 fits, the encoder stays on the device (the blocks gave way).
    Budget 35: even the encoder off leaves 30 + 10 = 40: the plan is the one asked (device), refused.
    Kills moving a fitting encoder, and returning the smallest encoder's plan when nothing fits."""
    plan = compose(with_budget(75), [BLOCKS, Encoder(20)], give_way=("t",), last=("text",))
    assert [c.option for c in plan.costs] == [1, "device"] and plan.peak_bytes == 70
    plan = compose(with_budget(35), [BLOCKS, Encoder(20)], give_way=("t",), last=("text",))
    assert [c.option for c in plan.costs] == [2, "device"] and not plan.fits
