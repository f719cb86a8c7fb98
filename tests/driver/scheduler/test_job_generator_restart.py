"""JobGenerator after a restart: resubmitted batch times run in order with the blocks
their allocation logged and are checkpointed at completion only; a restart allocates
every batch at once and generates one ahead (a deferred batch counts its wait from its
allocation, and a checkpoint lists it pending); a graceful stop runs or submits every
deferred batch; more resubmitted times than the event queue holds do not hang the start.

A ReceivedBlockTracker over an in-memory WAL and a real JobScheduler; the jobs
are plain Python callables and the batch interval is 100 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tests.driver.generator_harness import Harness, block, ids
from tests.driver.helpers import WAIT_S
from walstream.testing import wait_until

pytestmark = pytest.mark.timeout(30)


def test_resubmit_generates_past_times_in_order_with_their_logged_blocks() -> None:
    h = Harness()
    try:
        # A recovered tracker: batch 1000 was allocated (b0) before the crash, b1 came later.
        b0, b1 = block(0, 2), block(1, 6)
        assert h.tracker.add_block(b0)
        h.tracker.allocate_blocks_to_batch(1000)
        assert h.tracker.add_block(b1)
        far = h.restart([3000, 1000, 2000])
        wait_until(lambda: len(h.completed_times()) == 3)
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
        wait_until(lambda: len(h.completed_times()) == 2)
        wait_until(lambda: len(calls) == 2)
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
        wait_until(lambda: 1000 in h.seen)  # the first batch runs
        # Every time is allocated (logged) in order at once, while at most the next
        # batch is built: 5000 took the waiting block.
        wait_until(lambda: h.tracker.allocated_batch_times() == times)
        with h.lock:
            assert h.generated in ([1000], [1000, 2000])
        assert ids(h.tracker.get_blocks_of_batch(5000)) == {blocks[4].block_id}
        # While 1000 runs (0.5 s) 2000 is built, and no more; the checkpoint's pending
        # list still holds every batch not completed.
        wait_until(lambda: h.generated == [1000, 2000])
        time.sleep(0.1)
        with h.lock:
            assert h.generated == [1000, 2000] and 1000 not in h.completed_times()
        assert h.gen.pending_times() == times
        wait_until(lambda: len(h.completed_times()) == 6)
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
        wait_until(lambda: len(h.completed_times()) == 3)
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
        wait_until(lambda: len(pending_at) == 4)
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
        wait_until(lambda: 1000 in h.seen)
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
        wait_until(lambda: 1000 in h.seen)
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
        wait_until(lambda: h.completed_times() == times)
    finally:
        h.close()
