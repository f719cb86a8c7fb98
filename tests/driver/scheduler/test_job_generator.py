"""JobGenerator: allocation before jobs, failures, cleanup order, checkpoints, stop.

Restarts (resubmitted and deferred batches) are in test_job_generator_restart.py.

A ReceivedBlockTracker over an in-memory WAL and a real JobScheduler; the jobs
are plain Python callables and the batch interval is 100 ms.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest

from tests.driver.generator_harness import Harness, block, ids
from tests.driver.helpers import INTERVAL, WAIT_S
from walstream.driver.scheduler.job_generator import JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import ListenerBus
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)

def test_blocks_are_allocated_before_jobs_are_generated(h: Harness) -> None:
    b0, c0 = block(0, 5), block(1, 7)
    assert h.tracker.add_block(b0) and h.tracker.add_block(c0)
    first = h.gen.start()
    assert first % INTERVAL == 0
    wait_until(lambda: h.batch_with(b0.block_id) is not None)
    assert h.batch_with(b0.block_id) == first
    # The tracker gave the blocks to `first` before the graph built its jobs.
    assert h.at_generation[first] == {b0.block_id, c0.block_id}
    assert h.seen[first] == {b0.block_id, c0.block_id}
    assert ids(h.tracker.get_blocks_of_batch(first)) == {b0.block_id, c0.block_id}
    wait_until(lambda: first in h.completed_times())
    assert h.records(first) == {0: 5, 1: 7}

    # A block added while running lands in the next batch generated after it.
    b1 = block(0, 3)
    assert h.tracker.add_block(b1)
    added_at = time.time() * 1000
    wait_until(lambda: h.batch_with(b1.block_id) is not None)
    t = h.batch_with(b1.block_id)
    assert t is not None and t > first
    assert t >= added_at - INTERVAL  # not given to an earlier boundary
    assert h.at_generation[t] == {b1.block_id}
    assert ids(h.tracker.get_blocks_of_batch(t)) == {b1.block_id}
    wait_until(lambda: t in h.completed_times())
    assert h.records(t) == {0: 3, 1: 0}
    # Each block in exactly one batch.
    with h.lock:
        owners = [bt for bt, s in h.seen.items() for bid in s if bid == b0.block_id]
    assert owners == [first]


def test_batch_times_are_consecutive_multiples_of_the_interval(h: Harness) -> None:
    first = h.gen.start()
    assert first % INTERVAL == 0 and first > time.time() * 1000 - INTERVAL
    wait_until(lambda: len(h.completed_times()) >= 4)
    times = h.completed_times()
    assert times[0] == first
    assert all(t % INTERVAL == 0 for t in times)
    assert [b - a for a, b in itertools.pairwise(times)] == [INTERVAL] * (len(times) - 1)
    # A batch is generated at (not before) its time.
    wait_until(lambda: h.gen.last_generated_ms is not None)
    assert h.tracker.last_allocated_batch_time_ms is not None
    assert h.tracker.last_allocated_batch_time_ms <= time.time() * 1000


def test_a_failed_allocation_write_leaves_blocks_for_the_next_batch(h: Harness) -> None:
    b0 = block(0, 4)
    assert h.tracker.add_block(b0)
    h.wal.fail_writes = 1  # the first allocation write fails
    first = h.gen.start()
    wait_until(lambda: h.batch_with(b0.block_id) is not None)
    # The first batch ran anyway, with nothing; the block went to the next one.
    wait_until(lambda: first in h.completed_times())
    assert h.seen[first] == set()
    assert h.records(first) == {}
    assert h.tracker.get_blocks_of_batch(first) == {}
    assert h.batch_with(b0.block_id) == first + INTERVAL
    wait_until(lambda: first + INTERVAL in h.completed_times())
    assert h.records(first + INTERVAL) == {0: 4, 1: 0}
    assert h.scheduler.errors == []


def test_cleanup_is_called_after_each_batch_completes(h: Harness) -> None:
    completed_when_cleaned: list[bool] = []
    orig = h.cleanup

    def cleanup(t: int) -> None:
        completed_when_cleaned.append(t in h.completed_times())
        orig(t)

    h.gen.cleanup = cleanup
    h.gen.start()
    wait_until(lambda: len(h.cleaned) >= 3)
    with h.lock:
        cleaned = list(h.cleaned)
    assert all(completed_when_cleaned)
    assert cleaned == sorted(cleaned)
    assert cleaned[:3] == h.completed_times()[:3]


class FakeCheckpointer:
    """Records calls; holds the completion callbacks until release() is called."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []  # (t, has a callback)
        self.held: list[tuple[int, Callable[[], None]]] = []
        self.lock = threading.Lock()

    def __call__(self, t: int, on_durable: Callable[[], None] | None) -> None:
        with self.lock:
            self.calls.append((t, on_durable is not None))
            if on_durable is not None:
                self.held.append((t, on_durable))

    def release(self) -> list[int]:
        with self.lock:
            held, self.held = self.held, []
        for _, cb in held:
            cb()
        return [t for t, _ in held]


def test_with_a_checkpointer_cleanup_waits_for_the_durable_checkpoint() -> None:
    cp = FakeCheckpointer()
    h = Harness(checkpointer=cp)
    try:
        first = h.gen.start()
        # Batch `first` completes; the checkpointer was asked (with a callback) ...
        wait_until(lambda: (first, True) in cp.calls)
        time.sleep(0.25)  # ... and more batches completed meanwhile
        assert len(h.completed_times()) >= 2
        assert h.cleaned == []  # nothing cleaned before the checkpoint is durable
        released = cp.release()
        assert released[0] == first
        assert h.cleaned == released
        # Per batch: the checkpoint at generation (no callback) came first.
        with cp.lock:
            calls = list(cp.calls)
        assert calls.index((first, False)) < calls.index((first, True))
    finally:
        h.close()


def test_a_checkpointer_is_asked_after_each_batch_even_without_cleanup() -> None:
    """Spark checkpoints again when a batch completes (so it is no longer pending)."""
    cp = FakeCheckpointer()
    h = Harness(cleanup=False, checkpointer=cp)
    try:
        first = h.gen.start()
        wait_until(lambda: first in h.completed_times())
        wait_until(lambda: len([c for c in cp.calls if c[0] == first]) == 2)
        assert next(c for c in cp.calls if c[0] == first) == (first, False)
        cp.release()  # a callback, when given, is harmless to call
    finally:
        h.close()


def test_stop_with_drain_keeps_generating_until_drained() -> None:
    h = Harness(job_s=0.15)  # batches still running when the drain holds
    try:
        h.gen.start()
        wait_until(lambda: h.gen.last_generated_ms is not None)
        b0 = block(0, 1)
        assert h.tracker.add_block(b0)
        stop_called = time.time() * 1000
        drained_at: list[float] = []

        def drain() -> bool:
            # Drained once the block is allocated and 300 ms passed.
            done = not h.tracker.has_unallocated_blocks() and \
                time.time() * 1000 >= stop_called + 300
            if done and not drained_at:
                drained_at.append(time.time() * 1000)
            return done

        next_time = h.gen.stop(drain=drain, timeout_s=WAIT_S)
        assert drained_at
        last = h.gen.last_generated_ms
        assert last is not None and last >= stop_called + 300 - INTERVAL
        assert next_time % INTERVAL == 0 and next_time > last
        assert not h.tracker.has_unallocated_blocks()
        # The generator is stopped: no further batches.
        time.sleep(2.5 * INTERVAL / 1000)
        assert h.gen.last_generated_ms == last
        # A graceful stop returns once the batches generated before it completed and
        # their completion (checkpoint, cleanup) was handled, as Spark's does.
        assert h.scheduler.pending_times() == []
        assert h.batch_with(b0.block_id) is not None
        assert h.completed_times()[-1] == last
        assert h.cleaned == h.completed_times()
    finally:
        h.close()


def test_stop_without_drain_is_prompt() -> None:
    h = Harness()
    try:
        h.gen.start()
        wait_until(lambda: h.gen.last_generated_ms is not None)
        started = time.monotonic()
        h.gen.stop(timeout_s=2)
        assert time.monotonic() - started < 1.0
        last = h.gen.last_generated_ms
        time.sleep(2.5 * INTERVAL / 1000)
        assert h.gen.last_generated_ms == last
    finally:
        h.close()


def test_an_error_generating_jobs_is_reported_and_later_batches_run() -> None:
    calls: list[int] = []

    def generate(t: int) -> list[Job]:
        calls.append(t)
        if len(calls) == 1:
            raise RuntimeError("graph exploded 7")
        return [Job(t, 0, "noop", lambda: None)]

    h = Harness(generate=generate)
    try:
        first = h.gen.start()
        err = h.scheduler.await_error(WAIT_S)
        # The original error, as Spark's awaitTermination rethrows it, naming the batch.
        assert isinstance(err, RuntimeError) and str(err) == "graph exploded 7"
        assert f"Error generating jobs for time {first}" in err.__notes__
        wait_until(lambda: len(h.completed_times()) >= 2)
        assert first not in h.completed_times()
    finally:
        h.close()


# -- the timer against a full event queue -------------------------------------------------


def test_a_full_event_queue_holds_the_timer_back_and_drops_no_batch() -> None:
    # Two queue slots and a first batch that hangs 1.5 s (longer than the old
    # 10-interval drop timeout): the timer's ticks wait for room, none is lost.
    release = threading.Event()
    generated: list[int] = []

    def generate(t: int) -> list[Job]:
        generated.append(t)
        if len(generated) == 1:
            release.wait(5)
        return []

    tracker = ReceivedBlockTracker([0], MemoryWAL())
    scheduler = JobScheduler(ListenerBus())
    gen = JobGenerator(tracker, INTERVAL, generate, scheduler, max_events=2)
    try:
        first = gen.start((int(time.time() * 1000) // INTERVAL - 20) * INTERVAL)
        time.sleep(1.5)
        assert len(generated) == 1  # the loop is stuck in the first batch
        release.set()
        wait_until(lambda: len(generated) >= 30)
        n = len(generated)
        assert generated[:n] == list(range(first, first + n * INTERVAL, INTERVAL))
    finally:
        release.set()
        started = time.monotonic()
        gen.stop(timeout_s=2)
        assert time.monotonic() - started < 3.0
        scheduler.stop(wait_for_jobs=False)


def test_stop_releases_a_timer_blocked_on_a_full_queue() -> None:
    release = threading.Event()

    def generate(t: int) -> list[Job]:
        release.wait(10)
        return []

    tracker = ReceivedBlockTracker([0], MemoryWAL())
    scheduler = JobScheduler(ListenerBus())
    gen = JobGenerator(tracker, INTERVAL, generate, scheduler, max_events=1)
    try:
        gen.start((int(time.time() * 1000) // INTERVAL - 20) * INTERVAL)
        time.sleep(0.3)  # loop stuck, queue full, timer blocked in its post
        started = time.monotonic()
        stopper = threading.Thread(target=gen.stop, kwargs={"timeout_s": 2})
        stopper.start()
        time.sleep(0.7)
        release.set()  # the loop drains the queued tick, then sees "stop"
        stopper.join(5)
        assert not stopper.is_alive()
        assert time.monotonic() - started < 3.0
        assert not gen._timer._thread.is_alive()
    finally:
        release.set()
        scheduler.stop(wait_for_jobs=False)
