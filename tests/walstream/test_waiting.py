"""wait_until, the test kit's one bounded wait: its timeout, its early abort and its
progress-extended bound, run on a fake clock so no test depends on the machine's speed."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from walstream.testing import waiting
from walstream.testing.waiting import WaitTimeoutError, wait_until


class FakeClock:
    """Stands in for the ``time`` module inside :mod:`walstream.testing.waiting`:
    ``sleep`` advances ``monotonic`` at once."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(waiting, "time", fake)
    yield fake


def countdown(n: int) -> Callable[[], bool]:
    """A condition that turns true on its ``n``-th call."""
    calls = iter(range(n, 0, -1))
    return lambda: next(calls, 1) == 1


def test_returns_once_the_condition_holds_pausing_poll_s_between_polls(clock: FakeClock) -> None:
    wait_until(countdown(4), 10, "four polls", poll_s=0.2)
    assert clock.sleeps == [0.2, 0.2, 0.2]


def test_times_out_with_what_and_details(clock: FakeClock) -> None:
    with pytest.raises(WaitTimeoutError) as info:
        wait_until(lambda: False, 3, "the thing", poll_s=0.5, details=lambda: "log tail")
    assert str(info.value) == "timed out after 3s waiting for the thing\nlog tail"
    assert isinstance(info.value, AssertionError) and isinstance(info.value, TimeoutError)
    assert 3 <= clock.now - 100.0 <= 3.5


def test_abort_fails_at_once_with_its_reason_and_details(clock: FakeClock) -> None:
    reasons = iter([None, None, "the app exited (1)"])
    with pytest.raises(WaitTimeoutError) as info:
        wait_until(lambda: False, 60, "the first batch", poll_s=0.2,
                   abort=lambda: next(reasons), details=lambda: "last lines")
    assert str(info.value) == \
        "gave up waiting for the first batch: the app exited (1)\nlast lines"
    assert clock.sleeps == [0.2, 0.2]  # the third poll aborted, long before 60 s


def test_a_true_condition_wins_over_abort(clock: FakeClock) -> None:
    asked: list[int] = []

    def abort() -> str | None:
        asked.append(1)
        return "exited"

    wait_until(lambda: True, 1, "done", abort=abort)
    assert asked == []


def test_progress_extends_the_wait_beyond_stall_s(clock: FakeClock) -> None:
    batches = iter(range(1000))
    wait_until(countdown(50), 100, "the totals", poll_s=1.0,
               progress=lambda: next(batches), stall_s=3)
    assert clock.now - 100.0 == 49.0  # far past stall_s: each poll saw a new batch


def test_no_progress_for_stall_s_fails(clock: FakeClock) -> None:
    with pytest.raises(WaitTimeoutError) as info:
        wait_until(lambda: False, 100, "the totals", poll_s=1.0,
                   progress=lambda: 7, stall_s=3, details=lambda: "7 batches")
    assert str(info.value).startswith("timed out waiting for the totals: no progress for 4s")
    assert str(info.value).endswith("\n7 batches")
    assert clock.now - 100.0 == 4.0


def test_timeout_s_bounds_a_wait_that_keeps_progressing(clock: FakeClock) -> None:
    batches = iter(range(1000))
    with pytest.raises(WaitTimeoutError, match="timed out after 10s waiting for the totals"):
        wait_until(lambda: False, 10, "the totals", poll_s=1.0,
                   progress=lambda: next(batches), stall_s=3)


def test_progress_and_stall_s_go_together() -> None:
    with pytest.raises(ValueError):
        wait_until(lambda: True, 1, progress=lambda: 0)
    with pytest.raises(ValueError):
        wait_until(lambda: True, 1, stall_s=1.0)
