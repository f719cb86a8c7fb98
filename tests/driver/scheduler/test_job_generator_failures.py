"""JobGenerator failures: a batch whose inputs cannot be prepared is never skipped
silently, and every event-loop failure reaches ``awaitTermination``.

A ReceivedBlockTracker over an in-memory WAL and a real JobScheduler; the
``before_allocate`` hook (a direct stream's end-offset probe in production) is a
plain callable that fails as a Kafka outage makes it fail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from tests.driver.helpers import INTERVAL, WAIT_S
from walstream.driver.errors import JobFailedError, StreamClosedError
from walstream.driver.scheduler.job_generator import JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import ListenerBus
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)


class Rig:
    """Tracker + scheduler + generator whose ``before_allocate`` runs ``probe``."""

    def __init__(self, probe: Callable[[int], None], **kw: object) -> None:
        self.probe = probe
        self.calls: list[int] = []
        self.generated: list[int] = []
        self.tracker = ReceivedBlockTracker([0], MemoryWAL())
        self.scheduler = JobScheduler(ListenerBus(),
                                      on_batch_completed=lambda i: self.gen.on_batch_completed(i))
        self.gen = JobGenerator(self.tracker, INTERVAL, self._jobs, self.scheduler,
                                before_allocate=self._before, **kw)  # type: ignore[arg-type]

    def _before(self, t: int) -> None:
        self.calls.append(t)
        self.probe(t)

    def _jobs(self, t: int) -> list[Job]:
        self.generated.append(t)
        return [Job(t, 0, "noop", lambda: None)]

    def close(self) -> None:
        self.gen.stop(timeout_s=2)
        self.scheduler.stop(wait_for_jobs=False)


@pytest.fixture
def rigs() -> Iterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for r in made:
        r.close()


def _kafka_down(t: int) -> None:
    raise TimeoutError(f"no answer reading the end of topic[0] for batch {t}")


def test_failed_before_allocate_reports_the_original_error_and_skips_no_batch(
        rigs: list[Rig]) -> None:
    """Kafka stays down: batch t is retried, then its original error reaches
    awaitTermination (naming the batch), and no later batch is allocated past it."""
    rig = Rig(_kafka_down)
    rigs.append(rig)
    first = rig.gen.start()
    err = rig.scheduler.await_error(2 * WAIT_S)
    assert err is not None, "the failure was only logged"
    assert isinstance(err, TimeoutError) and not isinstance(err, JobFailedError)
    assert f"batch {first}" in str(err)
    assert f"Error preparing batch {first}" in err.__notes__
    # Nothing after the failed batch was allocated or generated: it is not skipped.
    assert rig.tracker.last_allocated_batch_time_ms is None
    assert rig.gen.last_allocated_ms is None
    assert rig.generated == []
    assert set(rig.calls) == {first}, "a later batch was prepared past the failed one"


def test_failed_before_allocate_calls_on_fatal_once_with_the_original_error(
        rigs: list[Rig]) -> None:
    fatal: list[BaseException] = []
    told = threading.Event()

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        told.set()

    rig = Rig(_kafka_down, allocate_retries=2, allocate_backoff_ms=10, on_fatal=on_fatal)
    rigs.append(rig)
    first = rig.gen.start()
    assert told.wait(WAIT_S)
    assert rig.calls == [first] * 3  # the first attempt and two retries, no more
    wait_until(lambda: rig.scheduler.await_error(0) is not None)
    rig.gen.stop(timeout_s=2)
    assert len(fatal) == 1 and isinstance(fatal[0], TimeoutError)
    err = rig.scheduler.await_error(0)
    assert err is fatal[0]


def test_a_transient_before_allocate_failure_is_retried_and_the_batch_runs(
        rigs: list[Rig]) -> None:
    failures = [ConnectionError("broker down"), TimeoutError("no answer")]

    def flaky(t: int) -> None:
        if failures:
            raise failures.pop(0)

    rig = Rig(flaky, allocate_retries=3, allocate_backoff_ms=10)
    rigs.append(rig)
    first = rig.gen.start()
    wait_until(lambda: first in [i.batchTime() for i in rig.scheduler.completed])
    assert rig.calls[:3] == [first] * 3
    assert rig.generated[0] == first
    assert rig.scheduler.await_error(0) is None
    assert rig.gen.failed is None


def test_a_final_before_allocate_error_is_not_retried(rigs: list[Rig]) -> None:
    def closed(t: int) -> None:
        raise StreamClosedError("direct stream 0 is closed (context stopped)")

    rig = Rig(closed, allocate_retries=5, allocate_backoff_ms=1000)
    rigs.append(rig)
    first = rig.gen.start()
    err = rig.scheduler.await_error(WAIT_S)
    assert isinstance(err, StreamClosedError)
    assert rig.calls == [first]


def test_a_graceful_stop_after_a_failed_batch_does_not_wait_for_a_drain(
        rigs: list[Rig]) -> None:
    rig = Rig(_kafka_down, allocate_retries=0)
    rigs.append(rig)
    rig.gen.start()
    assert rig.scheduler.await_error(WAIT_S) is not None
    started = threading.Event()
    done = threading.Event()

    def stop() -> None:
        started.set()
        rig.gen.stop(drain=lambda: False, timeout_s=20)
        done.set()

    threading.Thread(target=stop, daemon=True).start()
    assert started.wait(1)
    assert done.wait(WAIT_S), "the graceful stop waited for batches that never come"


def test_any_event_loop_failure_reaches_await_error(rigs: list[Rig]) -> None:
    """As Spark's EventLoop.onError: a failure handling an event (here the cleanup
    after a batch) is reported to the scheduler, not only logged."""
    def cleanup(t: int) -> None:
        raise KeyError(f"cleanup of {t}")

    rig = Rig(lambda t: None, cleanup=cleanup)
    rigs.append(rig)
    rig.gen.start()
    err = rig.scheduler.await_error(WAIT_S)
    assert isinstance(err, KeyError)  # the original error, as Spark's awaitTermination
    assert any("job generator" in note for note in err.__notes__)
