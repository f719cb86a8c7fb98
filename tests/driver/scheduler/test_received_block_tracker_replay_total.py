"""The tracker's replay progress has a total in WAL records, from the log's end offsets:
its lines say events so far, records read of that total (percent), rate and ETA, and
the final line the records read of the total; the records read reach the total exactly
on a real Kafka WAL with batched groups and chunked records."""

from __future__ import annotations

import io
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from walstream.driver.dstream.checkpoint_inspect import replay_progress
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.progress import Extent, ProgressReporter, ProgressSnapshot
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import MemoryWAL
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle, serialize_batch
from walstream.wal.base import ForwardingWriteAheadLog, ReplayProgress

_ids = itertools.count()
TRACKER_LOG = "walstream.driver.scheduler.received_block_tracker"


class Clock:
    def __init__(self, now: float = 1_000.0, step: float = 0.0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def block(stream: int = 0, partitions: int = 1) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 10, RecordHandle("wal", 0, i),
                             tuple(SourceRange("src", p, i * 10, (i + 1) * 10)
                                   for p in range(partitions)))


class StoredGroupsWAL(MemoryWAL):
    """A log that counts its stored records as a Kafka log counts offsets: the total is
    known when ``read_all`` starts, a record counts as read before its data is handed
    on, and each record read takes ``step_s`` of the shared clock."""

    def __init__(self, records: list[tuple[bytes, int] | None], clock: Clock,
                 step_s: float) -> None:
        super().__init__(records)
        self.clock, self.step_s = clock, step_s
        self.progress: ReplayProgress | None = None

    def read_all(self) -> Iterator[bytes]:
        stored = super().read_all()
        self.progress = progress = ReplayProgress()

        def read() -> Iterator[bytes]:
            progress.total = sum(1 for r in self.records if r is not None)
            for record in stored:
                self.clock.now += self.step_s
                progress.consumed += 1
                yield record
        return read()

    def replay_progress(self) -> ReplayProgress | None:
        return self.progress


def grouped_log(events: int, per_group: int) -> list[tuple[bytes, int] | None]:
    """``events`` tracker events (blocks then one allocation), ``per_group`` to a record."""
    wal = MemoryWAL()
    t = ReceivedBlockTracker([0], wal, clock=Clock())
    for _ in range(events - 1):
        t.add_block(block())
    t.allocate_blocks_to_batch(2000)
    encoded = [r[0] for r in wal.records if r is not None]
    return [(serialize_batch(encoded[i:i + per_group]), 1_000 + i)
            for i in range(0, len(encoded), per_group)]


def test_the_replay_lines_carry_the_record_total_percent_and_eta(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    stored = StoredGroupsWAL(grouped_log(30, per_group=3), clock, step_s=1.0)
    # The driver's wrappers: metered (a forwarding wrapper) over batched groups.
    wal = ForwardingWriteAheadLog(BatchedWriteAheadLog(stored))
    with caplog.at_level(logging.INFO, logger=TRACKER_LOG):
        t = ReceivedBlockTracker([0], wal, clock=clock, replay_clock=clock)
    lines = [r.getMessage() for r in caplog.records if r.name == TRACKER_LOG]
    assert lines == [
        "tracker: replaying the driver WAL: so far 13 events, 5 of 10 WAL records (50%) "
        "in 5.0 s, 2.6 events/s, ETA 5.0 s",
        "tracker: replaying the driver WAL: so far 28 events, 10 of 10 WAL records (100%) "
        "in 10.0 s, 2.8 events/s, ETA 0.0 s",
        "tracker: recovered from 30 events, 10 of 10 WAL records in 10.0 s "
        "(3.0 events/s): 0 unallocated blocks, 1 allocated batches, last allocated 2000",
    ]
    assert t.recovery_stats.events_replayed == 30
    wal.close()


def test_a_log_that_cannot_tell_keeps_the_total_unknown() -> None:
    clock = Clock()
    seen: list[ProgressSnapshot] = []
    ReceivedBlockTracker(
        [0], BatchedWriteAheadLog(MemoryWAL(grouped_log(6, per_group=2))), clock=clock,
        replay_progress=ProgressReporter(lambda s, final: seen.append(s), 0.0, clock))
    assert [s.done for s in seen] == [1, 2, 3, 4, 5, 6, 6]
    assert all(s.extent is None and "total not known" in s.describe() for s in seen)


def test_replay_of_a_kafka_wal_reads_exactly_the_records_its_end_offsets_count(
        bootstrap: str, unique_name: Callable[[str], str]) -> None:
    name = unique_name("driver")
    options: dict[str, Any] = {"chunk_bytes": 1024, "rolling_interval_ms": 1_000,
                               "write_timeout_s": 20.0, "read_timeout_s": 20.0}
    clock = Clock(now=5_000.0, step=0.05)  # the writes span several segments
    live = ReceivedBlockTracker([0], BatchedWriteAheadLog(
        KafkaWriteAheadLog(bootstrap, name, **options)), clock=clock)
    try:
        for i in range(24):  # every fourth event a block of 60 partitions: chunked
            assert live.add_block(block(partitions=60 if i % 4 == 0 else 1))
        live.allocate_blocks_to_batch(int(clock.now * 1000))

        def add(n: int) -> None:
            for _ in range(n):
                assert live.add_block(block())

        writers = [threading.Thread(target=add, args=(10,)) for _ in range(4)]
        for w in writers:  # concurrent additions share groups
            w.start()
        for w in writers:
            w.join()
        live.allocate_blocks_to_batch(int(clock.now * 1000))
    finally:
        live.stop()
    events = 24 + 1 + 40 + 1

    kafka = KafkaWriteAheadLog(bootstrap, name, **options)
    try:
        stored = [handle for _record, _ts, handle in kafka.iter_records()]
        frames = sum(h.chunks for h in stored)
        assert len(kafka.segments()) >= 2
        assert frames > len(stored)  # chunked records: offsets, not records, are counted

        seen: list[ProgressSnapshot] = []
        replay = ProgressReporter(lambda s, final: seen.append(s), 0.0)
        wal = ForwardingWriteAheadLog(BatchedWriteAheadLog(kafka))
        t = ReceivedBlockTracker([0], wal, replay_progress=replay)
        end = replay.finish()
        assert end.done == events == t.recovery_stats.events_replayed
        assert end.extent == Extent(frames, frames)
        assert seen[0].extent is not None and seen[0].extent.total == frames > 0
        assert 0 < seen[0].extent.done < frames
        done = [s.extent.done for s in seen if s.extent is not None]
        assert done == sorted(done)
        assert t.state().allocated and not t.state().unallocated
        t.stop()
    finally:
        kafka.close()
        cleaner = KafkaWriteAheadLog(bootstrap, name)
        cleaner._clean_now(2**42)
        cleaner.close()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_walstream_inspect_draws_its_bar_in_wal_records_of_the_total() -> None:
    out, clock = Tty(), Clock()
    reporter = replay_progress("bar", out, clock)
    assert reporter is not None
    clock.step = 0.05
    wal = StoredGroupsWAL(grouped_log(30, per_group=3), clock, step_s=0.0)
    ReceivedBlockTracker([0], BatchedWriteAheadLog(wal), clock=clock,
                         replay_progress=reporter)
    last = out.getvalue().split("\r")[-1]
    assert "10/10" in last and "WAL records" in last and "30 events" in last


def test_walstream_inspect_lines_end_with_the_records_read_of_the_total() -> None:
    out, clock = io.StringIO(), Clock()
    reporter = replay_progress("lines", out, clock)
    assert reporter is not None
    wal = StoredGroupsWAL(grouped_log(30, per_group=3), clock, step_s=1.0)
    ReceivedBlockTracker([0], BatchedWriteAheadLog(wal), clock=clock,
                         replay_progress=reporter)
    assert out.getvalue().splitlines() == [
        "walstream inspect: replaying the driver WAL: 13 events, 5 of 10 WAL records "
        "(50%) in 5.0 s, 2.6 events/s, ETA 5.0 s",
        "walstream inspect: replaying the driver WAL: 28 events, 10 of 10 WAL records "
        "(100%) in 10.0 s, 2.8 events/s, ETA 0.0 s",
        "walstream inspect: replayed the driver WAL: 30 events in 10.0 s, "
        "10 of 10 WAL records",
    ]
