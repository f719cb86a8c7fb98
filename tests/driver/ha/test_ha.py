"""driver/ha/high_availability.py against the real broker: of two participants the
first leads and the second stands by; a leader's stop releases the lease, after
which its own WAL clean check says so (not a failure), and the standby leads the
next epoch at once. A lease log that does not answer in time at start (a loaded or
restarting broker) makes the process stand by and keep trying, not exit."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from walstream.driver.ha.errors import LeaseError, LeaseIOError, LeaseReleasedError
from walstream.driver.ha.ha_conf import HaConfig
from walstream.driver.ha.high_availability import HighAvailability
from walstream.driver.ha.lease import Lease

WAIT_S = 30.0


class Calls:
    def __init__(self) -> None:
        self.led: list[int] = []
        self.stood_by = 0
        self.lost: list[BaseException] = []
        self.leading = threading.Event()

    def lead(self, epoch: int) -> None:
        self.led.append(epoch)
        self.leading.set()

    def stand_by(self) -> None:
        self.stood_by += 1


def _participant(bootstrap: str, topic: str, calls: Calls) -> HighAvailability:
    # A long lease: only the release, not an expiry, can hand it over in this test.
    cfg = HaConfig(lease_topic=topic, lease_timeout_s=20.0, renew_period_s=0.2)
    return HighAvailability(cfg, bootstrap, {}, lead=calls.lead, stand_by=calls.stand_by,
                            on_lost=calls.lost.append)


def test_a_stopped_leader_releases_and_the_standby_leads_the_next_epoch(
        bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("ha-lease")
    first, second = Calls(), Calls()
    a = _participant(bootstrap, topic, first)
    b = _participant(bootstrap, topic, second)
    try:
        assert a.start() == "leader"
        assert first.led == [1] and first.stood_by == 0
        a.check()  # leads: a clean may run
        assert b.start() == "standby"
        assert second.stood_by == 1 and second.led == []
        with pytest.raises(LeaseError):
            b.check()  # a standby never cleans

        a.stop()
        with pytest.raises(LeaseReleasedError):
            a.check()
        assert second.leading.wait(WAIT_S), "the standby did not lead after the release"
        assert second.led == [2]
        assert b.describe()["role"] == "leader" and b.describe()["epoch"] == 2
        b.check()
        assert first.lost == [] and second.lost == []  # a release is no loss
    finally:
        a.stop()
        b.stop()


def test_a_lease_log_that_does_not_answer_at_start_stands_by_and_claims_once_it_does(
        bootstrap: str, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = Lease.try_acquire
    slow = [LeaseIOError("lease topic: read the tail not done within bound")]

    def slow_at_first(self: Lease, floor: int = 0) -> bool:
        if slow:
            raise slow.pop()
        return real(self, floor)

    monkeypatch.setattr(Lease, "try_acquire", slow_at_first)
    calls = Calls()
    a = _participant(bootstrap, unique_name("ha-lease"), calls)
    try:
        assert a.start() == "standby"
        assert calls.stood_by == 1
        with pytest.raises(LeaseError):
            a.check()  # it does not lead: no claim was confirmed
        assert calls.leading.wait(WAIT_S), "the standby did not claim the free lease"
        assert calls.led == [1] and calls.lost == []
        a.check()
    finally:
        a.stop()
