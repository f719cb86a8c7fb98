"""What a restarted driver logs as it comes back: the catch-up's resubmitted batches
left (at most every interval, by an injected clock, and once when none is left) and
the first completed batch with the restart-to-batch time."""

from __future__ import annotations

import logging

import pytest

from tests.driver.generator_harness import Harness, block
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.restart_log import RestartLog
from walstream.testing import MemoryWAL, wait_until

LOG = "walstream.driver.scheduler.restart_log"
pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def replayed_tracker(clock: Clock) -> ReceivedBlockTracker:
    """A tracker that replayed a WAL of one event, its replay beginning at ``clock.now``."""
    wal = MemoryWAL()
    ReceivedBlockTracker([0], wal, clock=clock).allocate_blocks_to_batch(500)
    return ReceivedBlockTracker([0], MemoryWAL(wal.records), clock=clock,
                                replay_clock=clock)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG]


def test_catch_up_logs_batches_left_every_interval_and_once_when_caught_up(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = RestartLog(replayed_tracker(clock), clock, interval_s=10.0)
    times = [1000 * i for i in range(1, 11)]
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up(times)
        for t in times:
            clock.now += 4.0  # one batch every 4 s
            r.batch_completed(t)
    assert messages(caplog) == [
        "catch-up after the down time: 10 resubmitted batches to run (1000 .. 10000)",
        "first batch after the restart completed: batch 1000, 4.0 s after the restart "
        "began (WAL replay of 1 events: 0.0 s)",
        "catch-up after the down time: 7 of 10 resubmitted batches left (3 ran in 12.0 s, "
        "0.25 batches/s, ETA 28 s)",
        "catch-up after the down time: 4 of 10 resubmitted batches left (6 ran in 24.0 s, "
        "0.25 batches/s, ETA 16 s)",
        "catch-up after the down time: 1 of 10 resubmitted batches left (9 ran in 36.0 s, "
        "0.25 batches/s, ETA 4 s)",
        "caught up after the down time: 10 resubmitted batches ran in 40.0 s",
    ]
    assert all(rec.levelno == logging.INFO for rec in caplog.records if rec.name == LOG)
    assert r.batches_left() == 0
    assert r.first_batch_after_restart_s == pytest.approx(4.0)


def test_a_batch_that_is_not_resubmitted_does_not_count_and_a_failed_one_stays_left(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = RestartLog(replayed_tracker(clock), clock, interval_s=10.0)
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up([1000, 2000])
        clock.now += 50.0
        r.batch_completed(3000)  # a new batch (1000 failed: never completed)
        r.batch_completed(2000)
    assert r.batches_left() == 1
    assert not any("caught up" in m for m in messages(caplog))
    assert "batch 3000, 50.0 s after the restart began" in messages(caplog)[1]


def test_a_first_start_logs_no_restart_lines(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = RestartLog(ReceivedBlockTracker([0], MemoryWAL(), clock=clock), clock)
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up([])
        r.batch_completed(1000)
    assert messages(caplog) == []
    assert r.first_batch_after_restart_s is None


def test_the_job_generator_logs_its_restart(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    try:
        with caplog.at_level(logging.INFO, logger=LOG):
            h.restart([1000, 2000, 3000])
            wait_until(lambda: len(h.completed_times()) == 3)
            wait_until(lambda: any("caught up" in m for m in messages(caplog)))
        lines = messages(caplog)
        assert lines[0] == ("catch-up after the down time: 3 resubmitted batches to run "
                            "(1000 .. 3000)")
        assert lines[1].startswith("first batch after the restart completed: batch 1000, ")
        assert lines[-1].startswith("caught up after the down time: 3 resubmitted batches "
                                    "ran in ")
        assert h.gen.restart_log.first_batch_after_restart_s is not None
    finally:
        h.close()


def test_a_takeover_times_its_first_batch_from_the_claim(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = RestartLog(replayed_tracker(clock), clock)
    clock.now += 300.0  # the standby followed the WAL for five minutes
    r.took_over(clock.now)
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up([1000])
        clock.now += 1.25
        r.batch_completed(1000)
    assert messages(caplog)[1] == ("first batch after the takeover completed: batch 1000, "
                                   "1.25 s after the lease was claimed")
    assert r.first_batch_after_restart_s == pytest.approx(1.25)


def test_a_takeover_times_its_first_batch_of_new_data_from_the_old_leaders_last_renewal(
        caplog: pytest.LogCaptureFixture) -> None:
    # Replayed blocks and the backlog's batches are old data; the first batch that
    # holds a block this process's receivers stored is the first with new data.
    clock = Clock()
    tracker = replayed_tracker(clock)
    tracker.add_block(block(0, 5))  # as if logged before the takeover by the old leader
    tracker.first_own_block = None
    r = RestartLog(tracker, clock)
    clock.now += 60.0
    r.took_over(clock.now, old_leader_last_seen_s=clock.now - 1.1)
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up([1000])
        tracker.allocate_blocks_to_batch(1000)
        clock.now += 0.5
        r.batch_completed(1000, {0: 5})  # records, but replayed ones: old data
        tracker.allocate_blocks_to_batch(2000)
        r.new_batch_allocated(2000)  # a new batch, no block of its own receivers yet
        own = block(0, 7)
        tracker.add_block(own)
        assert tracker.first_own_block == own.block_id
        tracker.allocate_blocks_to_batch(3000)
        r.new_batch_allocated(3000)  # holds it
        tracker.add_block(block(0, 3))
        tracker.allocate_blocks_to_batch(4000)
        r.new_batch_allocated(4000)
        clock.now += 0.5
        r.batch_completed(2000, {0: 0})
        assert r.first_new_data_s is None
        clock.now += 0.75
        r.batch_completed(3000, {0: 7})
        r.batch_completed(4000, {0: 3})
    lines = messages(caplog)
    assert lines[2].startswith("caught up after the down time")
    assert lines[1] == ("first batch after the takeover completed: batch 1000, 0.50 s after "
                        "the lease was claimed, 1.60 s after the old leader's last renewal "
                        "read")
    assert lines[3:] == ["first batch with new data after the takeover completed: batch "
                         "3000, 1.75 s after the lease was claimed, 2.85 s after the old "
                         "leader's last renewal read"]
    assert r.first_new_data_s == pytest.approx(1.75)


def test_a_direct_stream_s_first_new_batch_with_records_is_new_data(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = RestartLog(replayed_tracker(clock), clock, driver_streams=[5])
    with caplog.at_level(logging.INFO, logger=LOG):
        r.begin_catch_up([1000])
        clock.now += 2.0
        r.batch_completed(1000, {5: 40})  # resubmitted: the ranges the old run fixed
        r.new_batch_allocated(2000)
        r.new_batch_allocated(3000)
        clock.now += 1.0
        r.batch_completed(2000, {5: 0, 0: 9})  # records only from a receiver's old blocks
        assert r.first_new_data_s is None
        clock.now += 1.0
        r.batch_completed(3000, {5: 12})
    assert messages(caplog)[-1] == ("first batch with new data after the restart completed: "
                                    "batch 3000, 4.00 s after the restart began")
    assert r.first_new_data_s == pytest.approx(4.0)
