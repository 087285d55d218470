"""The training LR schedule's clock starts after the first step, so compiling or waiting for data does not anneal it."""

from __future__ import annotations

import math

from training.train_world import _lr, schedule_progress


def test_time_before_the_first_step_does_not_count():
    # 40 s of compilation in a 200 s budget: 80 s after the first step is half of the 160 s left
    assert math.isclose(schedule_progress(10, 10_000, now=120.0, t_start=0.0, t_first=40.0, budget_s=200.0), 0.5)
    assert schedule_progress(10, 10_000, now=30.0, t_start=0.0, t_first=None, budget_s=200.0) == 10 / 10_000


def test_the_step_fraction_wins_when_it_is_ahead():
    assert schedule_progress(900, 1_000, now=1.0, t_start=0.0, t_first=0.5, budget_s=200.0) == 0.9


def test_the_schedule_reaches_its_floor_at_the_end_of_the_budget():
    end = schedule_progress(5, 10_000, now=200.0, t_start=0.0, t_first=40.0, budget_s=200.0)
    assert math.isclose(end, 1.0)
    assert math.isclose(_lr(4e-4, 5_000, end, 200), 0.05 * 4e-4)
    assert math.isclose(_lr(4e-4, 5_000, 0.0, 200), 4e-4)
