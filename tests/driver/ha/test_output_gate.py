"""OutputGate: an output operation starts only while the lease is held and stays valid
for the margin; a late renewal delays it, a lease that runs out or ends refuses it, and
the JobScheduler then never runs it and never completes its batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.driver.helpers import WAIT_S
from tests.driver.scheduler_doubles import Env, job
from walstream.driver.errors import NotLeaderError
from walstream.driver.ha.errors import LeaseFencedError
from walstream.driver.ha.output_gate import OutputGate

pytestmark = pytest.mark.timeout(30)


class Lease:
    """A lease as the gate sees it: held until ``ended``, valid until ``until``."""

    def __init__(self, left_s: float) -> None:
        self.until = time.monotonic() + left_s
        self.ended: BaseException | None = None

    def check(self) -> None:
        if self.ended is not None:
            raise self.ended
        if time.monotonic() >= self.until:
            raise NotLeaderError("not held")

    def validity(self) -> float:
        return max(0.0, self.until - time.monotonic()) if self.ended is None else 0.0


def test_an_output_starts_while_the_lease_stays_valid_for_the_margin() -> None:
    lease = Lease(left_s=0.9)
    OutputGate(lease.check, lease.validity, margin_s=0.25)("op")


def test_a_late_renewal_delays_the_output_and_a_confirmed_one_lets_it_start() -> None:
    lease = Lease(left_s=0.2)  # under the margin: a renewal is late
    gate = OutputGate(lease.check, lease.validity, margin_s=0.25)

    def renewed() -> None:
        time.sleep(0.1)
        lease.until = time.monotonic() + 1.0

    threading.Thread(target=renewed).start()
    started = time.monotonic()
    gate("op")
    assert 0.08 <= time.monotonic() - started < 0.2


def test_a_lease_that_runs_out_while_waiting_refuses_the_output() -> None:
    lease = Lease(left_s=0.1)
    started = time.monotonic()
    with pytest.raises(NotLeaderError, match="op of batch 5 not started"):
        OutputGate(lease.check, lease.validity, margin_s=0.25)("op of batch 5")
    assert time.monotonic() - started < 0.2  # refused at the deadline, not later


def test_an_ended_lease_refuses_at_once_with_its_reason() -> None:
    lease = Lease(left_s=5)
    lease.ended = LeaseFencedError("a", 1, 2, "b")
    with pytest.raises(NotLeaderError, match="not certain to lead"):
        OutputGate(lease.check, lease.validity, margin_s=0.25)("op")
    with pytest.raises(ValueError):
        OutputGate(lease.check, lease.validity, margin_s=0)


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.close()


def test_the_scheduler_never_runs_a_refused_output_and_never_completes_its_batch(
        env: Env) -> None:
    ran: list[str] = []
    leading = threading.Event()
    leading.set()

    def gate(what: str) -> None:
        if not leading.is_set():
            raise NotLeaderError(f"{what} not started: this driver's lease ran out")

    env.scheduler.output_gate = gate
    env.scheduler.submit_job_set([job(1000, 0, lambda: ran.append("a"))], 1000, {})
    assert env.scheduler.wait_idle(WAIT_S)
    leading.clear()
    env.scheduler.submit_job_set([job(2000, 0, lambda: ran.append("b"))], 2000, {})
    env.flush()
    assert ran == ["a"]
    assert [i.batchTime() for i in env.callbacks] == [1000]  # 2000 is not completed
    assert env.scheduler.failed_times() == [2000]
    assert "lease ran out" in (env.collector.last("op_completed", 2000).failureReason() or "")
