"""The fencing cut in the driver WAL: epochs on tracker events, EpochStarted, and
what replay, a standby's tail and a fenced (zombie) tracker do with them."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import pytest

from walstream.driver.errors import TrackerFencedError, TrackerWriteError
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import (
    EVENT_CODEC,
    BatchAllocation,
    BlockAddition,
    EpochStarted,
    decode_event,
    encode_event,
)
from walstream.errors import ConfigError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import MemoryWAL
from walstream.testing.memory_wal import Entry
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle

STREAMS = (0, 1)
_ids = itertools.count()
TRACKER_LOG = "walstream.driver.scheduler.received_block_tracker"


def block(stream: int = 0, n: int = 10) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(
        stream, f"input-{stream}-{i}", n, RecordHandle("wal-topic", 0, i),
        (SourceRange(f"src-{stream}", 0, i * n, (i + 1) * n),),
    )


def over(records: list[Entry | None], epoch: int = 0) -> ReceivedBlockTracker:
    """A tracker over a shared log (``records``), replaying what it holds."""
    return ReceivedBlockTracker(STREAMS, MemoryWAL(records), clock=lambda: 1_000.0,
                                epoch=epoch)


def data(records: list[Entry | None], i: int) -> bytes:
    entry = records[i]
    assert entry is not None
    return entry[0]


def positions(t: ReceivedBlockTracker) -> dict[int, tuple[SourceRange, ...]]:
    return {s: t.positions(s) for s in t.streams_with_positions()}


def known_ids(t: ReceivedBlockTracker) -> set[str]:
    state = t.state()
    return ({b.block_id for _, bs in state.unallocated for b in bs} |
            {b.block_id for _, streams in state.allocated for _, bs in streams for b in bs})


def test_a_tracker_stamps_its_epoch_on_every_event_it_logs() -> None:
    records: list[Entry | None] = []
    t = over(records, epoch=0)
    t.add_block(block())
    assert EVENT_CODEC.peek_version(data(records, 0)) == 1  # epoch 0: the old bytes
    t.start_epoch(3)
    b = block(1)
    t.add_block(b)
    t.allocate_blocks_to_batch(2000)
    t.cleanup_old_batches(1000, wait_for_completion=True)
    events = [decode_event(data(records, i)) for i in range(len(records))]
    assert [e.epoch for e in events] == [0, 3, 3, 3, 3]
    assert events[1] == EpochStarted(3) and events[2] == BlockAddition(b, 3)
    assert t.epoch == 3 and t.fence_epoch == 3 and not t.fenced


def test_replay_ignores_a_zombies_events_after_the_cut_and_applies_those_before() -> None:
    records: list[Entry | None] = []
    old = over(records)
    old.start_epoch(1)
    b1, b2, c1 = block(0), block(0), block(1)
    for b in (b1, b2, c1):
        assert old.add_block(b)
    old.allocate_blocks_to_batch(1000)
    before_cut = block(0)
    assert old.add_block(before_cut)  # logged before the cut: it counts

    # The new leader's cut lands; the old leader, paused, does not read the log.
    new = over(records)
    new.start_epoch(2)
    new_block = block(1)
    assert new.add_block(new_block)

    # The old leader wakes and writes on: a block (with its source range), an
    # allocation, a cleanup of batch 1000.
    zombie_block = block(0)
    assert old.add_block(zombie_block)
    old.allocate_blocks_to_batch(2000)
    old.cleanup_old_batches(1500, wait_for_completion=True)
    assert old.last_allocated_batch_time_ms == 2000  # it believes in them

    new.allocate_blocks_to_batch(3000)
    replayed = over(records)
    assert replayed.fence_epoch == 2
    assert replayed.allocated_batch_times() == [1000, 3000]  # not 2000; 1000 not cleaned
    assert replayed.get_blocks_of_batch(1000) == {0: (b1, b2), 1: (c1,)}
    assert replayed.get_blocks_of_batch(3000) == {0: (before_cut,), 1: (new_block,)}
    assert replayed.get_unallocated_blocks(0) == []
    assert zombie_block.block_id not in known_ids(replayed)
    assert replayed.positions(0) == (SourceRange("src-0", 0, before_cut.source[0].until_offset,
                                                 before_cut.source[0].until_offset),)
    assert replayed.last_allocated_batch_time_ms == 3000
    assert replayed.state() == new.state()
    assert replayed.fenced_events == 3
    assert replayed.fenced_by_epoch() == {1: 3}
    assert replayed.recovery_stats.fenced_events == 3


def test_a_takeover_after_reading_the_tail_cuts_the_old_leaders_later_events() -> None:
    records: list[Entry | None] = []
    old = over(records)
    old.start_epoch(1)
    for s in (0, 1, 0):
        assert old.add_block(block(s))
    old.allocate_blocks_to_batch(1000)
    standby = over(records)  # replays what is there, then tails
    tailed = len(records)
    for s in (1, 0):
        assert old.add_block(block(s))  # not yet read by the standby
    old.allocate_blocks_to_batch(2000)
    # The takeover reads the log to its end first, then logs its cut.
    while tailed < len(records):
        assert standby.apply_logged(data(records, tailed)) is True
        tailed += 1
    standby.start_epoch(2)
    assert standby.epoch == 2 and standby.fence_epoch == 2
    assert standby.get_blocks_of_batch(2000)
    tailed += 1  # the cut itself, applied when logged

    zombie = block(0)
    assert old.add_block(zombie)  # after the cut
    old.allocate_blocks_to_batch(3000)
    # The tail after the cut holds only void events of the old epoch.
    assert [standby.apply_logged(data(records, i)) for i in range(tailed, len(records))] == [
        False, False]
    assert standby.fenced_events == 2
    assert zombie not in standby.get_unallocated_blocks(0)

    for s in (0, 1):
        assert standby.add_block(block(s))
    standby.allocate_blocks_to_batch(3000)
    standby.add_block(block(1))
    standby.cleanup_old_batches(1500, wait_for_completion=True)

    replayed = over(records)
    assert replayed.state() == standby.state()
    assert positions(replayed) == positions(standby)
    assert zombie.block_id not in known_ids(replayed)
    assert replayed.fenced_events == 2

    # Its own events further on the tail were applied when logged: skipped.
    state = standby.state()
    assert not any(standby.apply_logged(data(records, i)) for i in range(tailed, len(records)))
    assert standby.state() == state


def test_a_zombie_that_reads_the_cut_refuses_to_log() -> None:
    records: list[Entry | None] = []
    old = over(records, epoch=1)
    assert old.add_block(block(0))
    records.append((encode_event(EpochStarted(2)), 1))  # the new leader's cut
    assert old.apply_logged(data(records, len(records) - 1)) is True
    assert old.fenced and old.fence_epoch == 2
    logged, state = len(records), old.state()
    with pytest.raises(TrackerFencedError, match="epoch 1 is fenced"):
        old.add_block(block(0))
    with pytest.raises(TrackerFencedError):
        old.allocate_blocks_to_batch(2000)
    with pytest.raises(TrackerFencedError):
        old.cleanup_old_batches(2000, wait_for_completion=True)
    with pytest.raises(TrackerFencedError):
        old.start_epoch(1)  # its own epoch again: below the cut
    assert len(records) == logged and old.state() == state

    # A tracker of epoch 1 restarted over that log is fenced by its replay.
    restarted = over(records, epoch=1)
    assert restarted.fenced
    with pytest.raises(TrackerFencedError):
        restarted.add_block(block(0))


def test_start_epoch_below_the_cut_is_fenced_and_bad_epochs_are_refused() -> None:
    t = over([])
    with pytest.raises(ConfigError):
        t.start_epoch(0)
    t.start_epoch(3)
    with pytest.raises(ConfigError):
        t.start_epoch(2)  # below its own epoch
    with pytest.raises(ConfigError):
        ReceivedBlockTracker(STREAMS, None, epoch=-1)
    other = over([(encode_event(EpochStarted(5)), 1)])
    with pytest.raises(TrackerFencedError):
        other.start_epoch(4)
    other.start_epoch(6)
    assert other.fence_epoch == 6 and not other.fenced


def test_a_failed_cut_write_changes_nothing_and_a_retry_logs_it() -> None:
    wal = MemoryWAL()
    t = ReceivedBlockTracker(STREAMS, wal, epoch=0)
    wal.fail_writes = 1
    with pytest.raises(TrackerWriteError, match="cut of epoch 2"):
        t.start_epoch(2)
    assert t.epoch == 0 and t.fence_epoch == 0 and wal.records == []
    t.start_epoch(2)
    assert t.epoch == 2 and [decode_event(data(wal.records, 0))] == [EpochStarted(2)]


def test_a_retried_start_whose_first_cut_landed_adopts_it_without_logging_again() -> None:
    records: list[Entry | None] = []
    standby = over(records)
    # The first attempt's write timed out, yet landed; the tail applied it.
    records.append((encode_event(EpochStarted(2)), 1))
    standby.apply_logged(data(records, 0))
    assert standby.fenced  # its epoch is still 0
    standby.start_epoch(2)
    assert not standby.fenced and standby.epoch == 2 and len(records) == 1
    assert standby.add_block(block(0))


def test_cuts_at_or_below_the_fence_are_ignored() -> None:
    b_old, b_new = block(0), block(0)
    log = [encode_event(EpochStarted(2)),
           encode_event(EpochStarted(1)),  # stale: an older epoch, void
           encode_event(EpochStarted(2)),  # the same cut logged again: ignored
           encode_event(BlockAddition(b_old, 1)),
           encode_event(BlockAddition(b_new, 2))]
    t = over([(d, 1) for d in log])
    assert t.fence_epoch == 2
    assert t.get_unallocated_blocks(0) == [b_new]
    assert t.fenced_by_epoch() == {1: 2}


def test_a_newer_epoch_without_its_cut_is_applied_and_fences_nothing() -> None:
    # A leader logs its cut before anything else; without one there is no cut to
    # enforce, so the newer epoch's events and the older epoch's after them count.
    b0, b3, b0_late = block(0), block(0), block(0)
    log = [encode_event(BlockAddition(b0)), encode_event(BlockAddition(b3, 3)),
           encode_event(BlockAddition(b0_late)),
           encode_event(BatchAllocation(1000, ((0, (b0, b3, b0_late)),), 3))]
    t = over([(d, 1) for d in log])
    assert t.fence_epoch == 0 and t.fenced_events == 0
    assert t.get_blocks_of_batch(1000) == {0: (b0, b3, b0_late)}


def test_version_1_events_replay_as_epoch_0_before_a_cut() -> None:
    b = block(0)
    v1 = [encode_event(BlockAddition(b)), encode_event(BatchAllocation(1000, ((0, (b,)),)))]
    assert all(EVENT_CODEC.peek_version(d) == 1 for d in v1)
    late = block(0)
    log = [*v1, encode_event(EpochStarted(1)), encode_event(BlockAddition(late))]
    t = over([(d, 1) for d in log])
    assert t.get_blocks_of_batch(1000) == {0: (b,)}
    assert t.get_unallocated_blocks(0) == []  # the epoch-0 block after the cut is void
    assert t.fenced_by_epoch() == {0: 1}


def test_void_events_are_logged_once_per_epoch_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = [encode_event(EpochStarted(3)),
           *(encode_event(BlockAddition(block(0), 1)) for _ in range(4)),
           *(encode_event(BlockAddition(block(0), 2)) for _ in range(2))]
    with caplog.at_level(logging.WARNING, logger=TRACKER_LOG):
        t = over([(d, 1) for d in log])
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == [
        "tracker: replay ignored 4 events of epoch 1 logged after a newer epoch's cut "
        "(the driver WAL's cut is epoch 3)",
        "tracker: replay ignored 2 events of epoch 2 logged after a newer epoch's cut "
        "(the driver WAL's cut is epoch 3)",
    ]
    caplog.clear()
    # Live on a tail: one line for a new epoch, none for one already reported.
    with caplog.at_level(logging.WARNING, logger=TRACKER_LOG):
        for epoch in (1, 0, 0, 0, 2):
            assert t.apply_logged(encode_event(BlockAddition(block(0), epoch))) is False
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "epoch 0" in lines[0]
    assert t.fenced_by_epoch() == {0: 3, 1: 5, 2: 3}
    assert t.fenced_events == 11


def test_an_undecodable_record_on_the_tail_is_skipped_and_counted() -> None:
    t = over([])
    assert t.apply_logged(b"garbage") is False
    assert t.corrupt_events == 1
    b = block(0)
    assert t.apply_logged(encode_event(BlockAddition(b)))
    assert t.get_unallocated_blocks(0) == [b]


def test_a_tracker_without_a_wal_applies_its_cut_at_once() -> None:
    t = ReceivedBlockTracker(STREAMS, None)
    t.start_epoch(1)
    assert t.fence_epoch == 1 and t.epoch == 1
    assert t.add_block(block(0))


def test_replay_with_epochs_from_the_kafka_wal(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("tracker-epochs")

    def kafka() -> BatchedWriteAheadLog:
        return BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, name))

    old = ReceivedBlockTracker(STREAMS, kafka(), epoch=1)
    new: ReceivedBlockTracker | None = None
    try:
        for s in (0, 1):
            assert old.add_block(block(s))
        old.allocate_blocks_to_batch(1000)
        new = ReceivedBlockTracker(STREAMS, kafka())
        new.start_epoch(2)
        assert old.add_block(block(0))  # void
        old.allocate_blocks_to_batch(2000)  # void
        assert new.add_block(block(1))
        new.allocate_blocks_to_batch(3000)
        replayed = ReceivedBlockTracker(STREAMS, kafka())
        try:
            assert replayed.state() == new.state()
            assert replayed.allocated_batch_times() == [1000, 3000]
            assert replayed.fenced_events == 2 and replayed.fence_epoch == 2
        finally:
            replayed.stop()
    finally:
        if new is not None:
            new.cleanup_old_batches(2**42, wait_for_completion=True)
            new.stop()
        old.stop()


class CutDuringWrite(MemoryWAL):
    """A WAL whose first write lets the tracker start epoch 2 before it stores."""

    tracker: ReceivedBlockTracker | None = None

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        tracker, self.tracker = self.tracker, None
        if tracker is not None:
            tracker.start_epoch(2)
        return super().write(record, time_ms)


def test_a_block_stamped_with_the_previous_epoch_behind_the_own_cut_is_not_kept() -> None:
    wal = CutDuringWrite()
    t = ReceivedBlockTracker(STREAMS, wal)
    wal.tracker = t
    b = block(0)
    assert t.add_block(b) is False  # logged as epoch 0 after the cut: void
    assert [decode_event(data(wal.records, i)) for i in range(2)] == [
        EpochStarted(2), BlockAddition(b, 0)]
    assert t.get_unallocated_blocks(0) == [] and not t.fenced
    assert t.add_block(b)  # the retry carries epoch 2
    assert over(wal.records).state() == t.state()
