"""RecurringTimer: every missed period fires, in order, on period boundaries; a failing
callback does not stop it; stop returns the next time it would have fired."""

from __future__ import annotations

import time

import pytest

from tests.driver.helpers import INTERVAL
from walstream.driver.scheduler.recurring_timer import RecurringTimer
from walstream.testing import wait_until

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def test_recurring_timer_fires_every_missed_period_in_order() -> None:
    ticks: list[int] = []
    clock = FakeClock(10.0)
    timer = RecurringTimer(INTERVAL, ticks.append, "t", clock=clock)
    assert timer.start(9_000) == 9_000
    wait_until(lambda: len(ticks) >= 11)
    time.sleep(0.05)
    assert ticks == list(range(9_000, 10_001, INTERVAL))  # late ticks not skipped
    clock.now_s = 10.25
    wait_until(lambda: len(ticks) >= 13)
    assert timer.stop() == 10_300
    assert ticks == list(range(9_000, 10_201, INTERVAL))


def test_recurring_timer_starts_on_the_next_boundary_and_survives_callback_errors() -> None:
    ticks: list[int] = []

    def cb(t: int) -> None:
        ticks.append(t)
        if len(ticks) == 1:
            raise RuntimeError("first tick fails")

    clock = FakeClock(12.345)
    timer = RecurringTimer(INTERVAL, cb, "t", clock=clock)
    assert timer.start() == 12_400
    time.sleep(0.05)
    assert ticks == []
    clock.now_s = 12.6
    wait_until(lambda: len(ticks) >= 3)
    started = time.monotonic()
    assert timer.stop() == 12_700
    assert time.monotonic() - started < 1.0
    assert ticks == [12_400, 12_500, 12_600]
