"""The tracker's WAL replay reports its progress (an injected clock) and keeps
:attr:`ReceivedBlockTracker.recovery_stats`."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

import pytest

from walstream.driver.scheduler.received_block_tracker import (
    REPLAY_LOG_INTERVAL_S,
    ReceivedBlockTracker,
    RecoveryStats,
)
from walstream.progress import ProgressReporter, ProgressSnapshot
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle

_ids = itertools.count()
TRACKER_LOG = "walstream.driver.scheduler.received_block_tracker"


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def block(stream: int = 0) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 10, RecordHandle("wal", 0, i),
                             (SourceRange("src", 0, i * 10, (i + 1) * 10),))


class SlowWAL(MemoryWAL):
    """Each record read takes ``step_s`` of the shared clock."""

    def __init__(self, records: list[tuple[bytes, int] | None], clock: Clock,
                 step_s: float) -> None:
        super().__init__(list(records))
        self.clock, self.step_s = clock, step_s

    def read_all(self) -> Iterator[bytes]:
        for record in super().read_all():
            self.clock.now += self.step_s
            yield record


def written_log(blocks: int) -> list[tuple[bytes, int] | None]:
    wal = MemoryWAL()
    t = ReceivedBlockTracker([0], wal, clock=Clock())
    for _ in range(blocks):
        t.add_block(block())
    t.allocate_blocks_to_batch(2000)
    return list(wal.records)


def test_a_replay_reports_progress_every_few_seconds_and_once_at_the_end() -> None:
    records = written_log(29)  # 30 events
    records.insert(3, (b"garbage", 1))  # 31 read, 1 undecodable
    clock = Clock()
    sink = _Sink()
    t = ReceivedBlockTracker(
        [0], SlowWAL(records, clock, step_s=1.0), clock=clock,
        replay_progress=ProgressReporter(sink, REPLAY_LOG_INTERVAL_S, clock=clock))
    assert sink.reports == [(5, False), (10, False), (15, False), (20, False),
                              (25, False), (30, False), (31, True)]
    assert t.recovery_stats == RecoveryStats(events_replayed=30, corrupt_events=1,
                                             seconds=31.0, started_at_s=1_000.0)


class _Sink:
    def __init__(self) -> None:
        self.reports: list[tuple[int, bool]] = []

    def __call__(self, snap: ProgressSnapshot, final: bool) -> None:
        self.reports.append((snap.done, final))


def test_the_default_replay_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    records = written_log(11)  # 12 events
    clock = Clock()
    wal = SlowWAL(records, clock, step_s=0.5)
    with caplog.at_level(logging.INFO, logger=TRACKER_LOG):
        t = ReceivedBlockTracker([0], wal, clock=clock, replay_clock=clock)
    lines = [r.getMessage() for r in caplog.records if r.name == TRACKER_LOG]
    assert lines == [
        "tracker: replaying the driver WAL: so far 10 events in 5.0 s, 2.0 events/s "
        "(total not known before the end)",
        "tracker: recovered from 12 events in 6.0 s (2.0 events/s): 0 unallocated blocks, "
        "1 allocated batches, last allocated 2000",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == TRACKER_LOG)
    assert t.recovery_stats.events_replayed == 12
    assert t.recovery_stats.seconds == pytest.approx(6.0)


def test_without_a_replay_the_stats_are_zero() -> None:
    clock = Clock(5.0)
    t = ReceivedBlockTracker([0], MemoryWAL(), recover_from_wal=False, clock=clock)
    assert t.recovery_stats == RecoveryStats(0, 0, 0.0, 5.0)
    assert ReceivedBlockTracker([0], None, clock=clock).recovery_stats.events_replayed == 0


def test_re_allocating_a_replayed_batch_is_not_an_info_line(
        caplog: pytest.LogCaptureFixture) -> None:
    records = written_log(1)
    t = ReceivedBlockTracker([0], MemoryWAL(records), clock=Clock())
    with caplog.at_level(logging.INFO, logger=TRACKER_LOG):
        t.allocate_blocks_to_batch(2000)  # a restart's resubmitted batch
    assert caplog.records == []


def test_an_empty_wal_is_one_plain_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=TRACKER_LOG):
        ReceivedBlockTracker([0], MemoryWAL(), clock=Clock())
    assert [r.getMessage() for r in caplog.records] == [
        "tracker: the driver WAL holds no events: starting empty"]
