"""JobGenerator: allocation before jobs, failures, cleanup order, restart.

A ReceivedBlockTracker over an in-memory WAL and a real JobScheduler; the jobs
are plain Python callables and the batch interval is 100 ms.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from driver.errors import JobFailedError
from driver.job_generator import JobGenerator
from driver.job_scheduler import Job, JobScheduler
from driver.listener import ListenerBus
from driver.received_block_tracker import ReceivedBlockTracker
from receiver.block import SourceRange
from receiver.block_info import ReceivedBlockInfo
from tests.driver.helpers import INTERVAL, WAIT_S, wait_until
from wal.handle import RecordHandle
from walstream.testing.memory_wal import MemoryWriteAheadLog

pytestmark = pytest.mark.timeout(30)

_ids = itertools.count()


def block(stream: int = 0, n: int = 10) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", n, RecordHandle("rwal", 0, i),
                             (SourceRange("src", stream, i * n, (i + 1) * n),))


def ids(blocks: dict[int, tuple[ReceivedBlockInfo, ...]]) -> set[str]:
    return {b.block_id for bs in blocks.values() for b in bs}


class Harness:
    """Tracker + scheduler + generator; each batch's job records what it saw."""

    def __init__(self, cleanup: bool = True,
                 checkpointer: Callable[[int, Callable[[], None] | None], None] | None = None,
                 generate: Callable[[int], list[Job]] | None = None,
                 job_s: float = 0.0, max_events: int = 10_000) -> None:
        self.job_s = job_s
        self.wal = MemoryWriteAheadLog()
        self.tracker = ReceivedBlockTracker([0, 1], self.wal)
        self.lock = threading.Lock()
        self.at_generation: dict[int, set[str]] = {}  # t -> blocks of t when jobs were built
        self.seen: dict[int, set[str]] = {}  # t -> blocks of t when the job ran
        self.generated: list[int] = []
        self.cleaned: list[int] = []
        self.scheduler = JobScheduler(ListenerBus(),
                                      on_batch_completed=lambda i: self.gen.on_batch_completed(i))
        self.gen = JobGenerator(self.tracker, INTERVAL, generate or self.generate_jobs,
                                self.scheduler, cleanup=self.cleanup if cleanup else None,
                                checkpointer=checkpointer, max_events=max_events)

    def generate_jobs(self, t: int) -> list[Job]:
        with self.lock:
            self.generated.append(t)
            self.at_generation[t] = ids(self.tracker.get_blocks_of_batch(t))

        def run() -> None:
            with self.lock:
                self.seen[t] = ids(self.tracker.get_blocks_of_batch(t))
            time.sleep(self.job_s)
        return [Job(t, 0, "collect", run)]

    def cleanup(self, t: int) -> None:
        with self.lock:
            self.cleaned.append(t)

    def completed_times(self) -> list[int]:
        return [i.batchTime() for i in self.scheduler.completed]

    def records(self, t: int) -> dict[int, int]:
        return next(i.num_records_per_stream for i in self.scheduler.completed
                    if i.batchTime() == t)

    def batch_with(self, block_id: str) -> int | None:
        with self.lock:
            return next((t for t, s in sorted(self.seen.items()) if block_id in s), None)

    def restart(self, times: list[int]) -> int:
        """Resubmit ``times`` as a restart does and start with a timer that stays
        quiet for an hour; returns the timer's first time."""
        self.gen.resubmit(times)
        far = (int(time.time() * 1000) // INTERVAL + 36_000) * INTERVAL
        assert self.gen.start(far) == far
        return far

    def close(self) -> None:
        self.gen.stop(timeout_s=2)
        self.scheduler.stop(wait_for_jobs=False)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


def test_blocks_are_allocated_before_jobs_are_generated(h: Harness) -> None:
    b0, c0 = block(0, 5), block(1, 7)
    assert h.tracker.add_block(b0) and h.tracker.add_block(c0)
    first = h.gen.start()
    assert first % INTERVAL == 0
    assert wait_until(lambda: h.batch_with(b0.block_id) is not None)
    assert h.batch_with(b0.block_id) == first
    # The tracker gave the blocks to `first` before the graph built its jobs.
    assert h.at_generation[first] == {b0.block_id, c0.block_id}
    assert h.seen[first] == {b0.block_id, c0.block_id}
    assert ids(h.tracker.get_blocks_of_batch(first)) == {b0.block_id, c0.block_id}
    assert wait_until(lambda: first in h.completed_times())
    assert h.records(first) == {0: 5, 1: 7}

    # A block added while running lands in the next batch generated after it.
    b1 = block(0, 3)
    assert h.tracker.add_block(b1)
    added_at = time.time() * 1000
    assert wait_until(lambda: h.batch_with(b1.block_id) is not None)
    t = h.batch_with(b1.block_id)
    assert t is not None and t > first
    assert t >= added_at - INTERVAL  # not given to an earlier boundary
    assert h.at_generation[t] == {b1.block_id}
    assert ids(h.tracker.get_blocks_of_batch(t)) == {b1.block_id}
    assert wait_until(lambda: t in h.completed_times())
    assert h.records(t) == {0: 3, 1: 0}
    # Each block in exactly one batch.
    with h.lock:
        owners = [bt for bt, s in h.seen.items() for bid in s if bid == b0.block_id]
    assert owners == [first]


def test_batch_times_are_consecutive_multiples_of_the_interval(h: Harness) -> None:
    first = h.gen.start()
    assert first % INTERVAL == 0 and first > time.time() * 1000 - INTERVAL
    assert wait_until(lambda: len(h.completed_times()) >= 4)
    times = h.completed_times()
    assert times[0] == first
    assert all(t % INTERVAL == 0 for t in times)
    assert [b - a for a, b in itertools.pairwise(times)] == [INTERVAL] * (len(times) - 1)
    # A batch is generated at (not before) its time.
    assert wait_until(lambda: h.gen.last_generated_ms is not None)
    assert h.tracker.last_allocated_batch_time_ms is not None
    assert h.tracker.last_allocated_batch_time_ms <= time.time() * 1000


def test_a_failed_allocation_write_leaves_blocks_for_the_next_batch(h: Harness) -> None:
    b0 = block(0, 4)
    assert h.tracker.add_block(b0)
    h.wal.fail_writes = 1  # the first allocation write fails
    first = h.gen.start()
    assert wait_until(lambda: h.batch_with(b0.block_id) is not None)
    # The first batch ran anyway, with nothing; the block went to the next one.
    assert wait_until(lambda: first in h.completed_times())
    assert h.seen[first] == set()
    assert h.records(first) == {}
    assert h.tracker.get_blocks_of_batch(first) == {}
    assert h.batch_with(b0.block_id) == first + INTERVAL
    assert wait_until(lambda: first + INTERVAL in h.completed_times())
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
    assert wait_until(lambda: len(h.cleaned) >= 3)
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
        assert wait_until(lambda: (first, True) in cp.calls)
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
        assert wait_until(lambda: first in h.completed_times())
        assert wait_until(lambda: len([c for c in cp.calls if c[0] == first]) == 2)
        assert next(c for c in cp.calls if c[0] == first) == (first, False)
        cp.release()  # a callback, when given, is harmless to call
    finally:
        h.close()


def test_resubmit_generates_past_times_in_order_with_their_logged_blocks() -> None:
    h = Harness()
    try:
        # A recovered tracker: batch 1000 was allocated (b0) before the crash, b1 came later.
        b0, b1 = block(0, 2), block(1, 6)
        assert h.tracker.add_block(b0)
        h.tracker.allocate_blocks_to_batch(1000)
        assert h.tracker.add_block(b1)
        far = h.restart([3000, 1000, 2000])
        assert wait_until(lambda: len(h.completed_times()) == 3)
        assert h.generated == [1000, 2000, 3000]
        assert h.completed_times() == [1000, 2000, 3000]
        assert h.seen[1000] == {b0.block_id}  # a re-run gets exactly the logged blocks
        assert h.seen[2000] == {b1.block_id}
        assert h.seen[3000] == set()
        assert h.records(1000) == {0: 2, 1: 0}
        assert h.records(2000) == {0: 0, 1: 6}
        assert h.gen.stop(timeout_s=2) == far  # the timer never fired
    finally:
        h.close()


def test_resubmitted_times_are_checkpointed_at_completion_only() -> None:
    # The restored checkpoint already re-runs them; a generate-time checkpoint per
    # resubmitted batch only competed with the first recovered batch for the CPU.
    calls: list[tuple[int, bool]] = []

    def checkpointer(t: int, on_done: Callable[[], None] | None) -> None:
        calls.append((t, on_done is None))
        if on_done is not None:
            on_done()

    h = Harness(checkpointer=checkpointer)
    try:
        h.restart([1000, 2000])
        assert wait_until(lambda: len(h.completed_times()) == 2)
        assert wait_until(lambda: len(calls) == 2)
        assert calls == [(1000, False), (2000, False)]  # completion checkpoints only
        assert h.cleaned == [1000, 2000]
    finally:
        h.close()


def test_a_restart_allocates_every_batch_at_once_and_generates_one_ahead() -> None:
    # Generating all resubmitted batches at once competed with the first recovered
    # batch for the driver; now only the next one is generated while one runs.
    h = Harness(job_s=0.5)
    try:
        blocks = [block(0, 1) for _ in range(5)]
        for i, b in enumerate(blocks[:4]):  # four batches allocated before the crash
            assert h.tracker.add_block(b)
            h.tracker.allocate_blocks_to_batch(1000 * (i + 1))
        assert h.tracker.add_block(blocks[4])  # received, not allocated: the down time
        times = [1000, 2000, 3000, 4000, 5000, 6000]
        h.restart(times)
        assert wait_until(lambda: 1000 in h.seen)  # the first batch runs
        # Every time is allocated (logged) in order at once, while at most the next
        # batch is built: 5000 took the waiting block.
        assert wait_until(lambda: h.tracker.allocated_batch_times() == times)
        with h.lock:
            assert h.generated in ([1000], [1000, 2000])
        assert ids(h.tracker.get_blocks_of_batch(5000)) == {blocks[4].block_id}
        # While 1000 runs (0.5 s) 2000 is built, and no more; the checkpoint's pending
        # list still holds every batch not completed.
        assert wait_until(lambda: h.generated == [1000, 2000])
        time.sleep(0.1)
        with h.lock:
            assert h.generated == [1000, 2000] and 1000 not in h.completed_times()
        assert h.gen.pending_times() == times
        assert wait_until(lambda: len(h.completed_times()) == 6)
        assert h.generated == times and h.completed_times() == times
        assert [h.seen[t] for t in times] == [{b.block_id} for b in blocks] + [set()]
        assert h.gen.pending_times() == []
    finally:
        h.close()


def test_a_deferred_batch_counts_its_wait_from_its_allocation() -> None:
    h = Harness(job_s=0.5)
    try:
        started = time.time() * 1000
        h.restart([1000, 2000, 3000])
        assert wait_until(lambda: len(h.completed_times()) == 3)
        last = h.scheduler.completed[-1]
        # 3000 was generated only after 1000 finished (~0.5 s), yet it was submitted
        # (allocated) at the restart, so its scheduling delay shows the ~1 s it waited.
        assert last.submission_time_ms < started + 400
        assert last.schedulingDelay() >= 800
    finally:
        h.close()


def test_a_checkpoint_written_while_batches_are_deferred_lists_them_pending() -> None:
    pending_at: dict[int, list[int]] = {}
    h: Harness

    def checkpointer(t: int, on_done: Callable[[], None] | None) -> None:
        if on_done is not None:
            pending_at[t] = h.gen.pending_times()
            on_done()

    h = Harness(checkpointer=checkpointer, job_s=0.2)
    try:
        h.restart([1000, 2000, 3000, 4000])
        assert wait_until(lambda: len(pending_at) == 4)
        # At 1000's completion 3000 and 4000 were not generated yet: a crash then must
        # re-run them, so the checkpoint names them.
        assert pending_at[1000] == [2000, 3000, 4000]
        assert pending_at[4000] == []
    finally:
        h.close()


def test_a_graceful_stop_runs_the_deferred_batches_first() -> None:
    # Quick jobs: the scheduler is idle for a moment between two batches while the
    # generator still holds deferred ones; the stop must wait for those, not for idle.
    h = Harness()
    try:
        times = list(range(1000, 41_000, 1000))
        h.restart(times)
        assert wait_until(lambda: 1000 in h.seen)
        h.gen.stop(drain=lambda: True, timeout_s=WAIT_S)
        assert h.completed_times() == times
        assert h.cleaned == times
    finally:
        h.close()


def test_a_graceful_stop_out_of_time_submits_every_deferred_batch() -> None:
    h = Harness(job_s=0.3)
    try:
        times = list(range(1000, 11_000, 1000))
        h.restart(times)
        assert wait_until(lambda: 1000 in h.seen)
        # 10 x 0.3 s of jobs cannot finish in 0.5 s: the stop gives up waiting, but
        # builds and submits every batch first rather than dropping the deferred ones.
        stop_started = time.monotonic()
        h.gen.stop(drain=lambda: True, timeout_s=0.5)
        # Bounded: not the ~2.7 s the rest of the jobs take one after another.
        assert time.monotonic() - stop_started < 2.0
        with h.lock:
            assert h.generated == times
        assert h.scheduler.pending_times() == [t for t in times if t not in
                                               h.completed_times()]
    finally:
        h.close()


def test_more_resubmitted_times_than_the_event_queue_holds_do_not_hang_the_start() -> None:
    h = Harness(max_events=5)
    try:
        times = list(range(1000, 41_000, 1000))  # 40 times, a queue of 5
        started = threading.Thread(target=h.restart, args=(times,), daemon=True)
        started.start()
        started.join(WAIT_S)
        assert not started.is_alive()
        assert wait_until(lambda: h.completed_times() == times)
    finally:
        h.close()


def test_stop_with_drain_keeps_generating_until_drained() -> None:
    h = Harness(job_s=0.15)  # batches still running when the drain holds
    try:
        h.gen.start()
        assert wait_until(lambda: h.gen.last_generated_ms is not None)
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
        assert wait_until(lambda: h.gen.last_generated_ms is not None)
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
        assert isinstance(err, JobFailedError)
        assert "graph exploded 7" in str(err) and str(first) in str(err)
        assert wait_until(lambda: len(h.completed_times()) >= 2)
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

    tracker = ReceivedBlockTracker([0], MemoryWriteAheadLog())
    scheduler = JobScheduler(ListenerBus())
    gen = JobGenerator(tracker, INTERVAL, generate, scheduler, max_events=2)
    try:
        first = gen.start((int(time.time() * 1000) // INTERVAL - 20) * INTERVAL)
        time.sleep(1.5)
        assert len(generated) == 1  # the loop is stuck in the first batch
        release.set()
        assert wait_until(lambda: len(generated) >= 30)
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

    tracker = ReceivedBlockTracker([0], MemoryWriteAheadLog())
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
