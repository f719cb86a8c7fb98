"""ReceivedBlockTracker: log-before-mutate, exact replay, and Spark's bugs in this area."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from walstream.driver.errors import TrackerWriteError
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import (
    EVENT_CODEC,
    BatchAllocation,
    BlockAddition,
    decode_event,
    encode_event,
)
from walstream.errors import CorruptDataError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import MemoryWAL
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle

_ids = itertools.count()


def block(stream: int = 0, n: int = 10) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(
        stream, f"input-{stream}-{i}", n, RecordHandle("wal-topic", 0, i),
        (SourceRange("src", 0, i * n, (i + 1) * n),),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def tracker_over(wal: MemoryWAL, streams: tuple[int, ...] = (0, 1)) -> (
    ReceivedBlockTracker
):
    return ReceivedBlockTracker(streams, wal, clock=Clock())


def test_add_allocate_get() -> None:
    t = tracker_over(MemoryWAL())
    b1, b2, c1 = block(0), block(0), block(1)
    for b in (b1, b2, c1):
        assert t.add_block(b)
    assert t.get_unallocated_blocks(0) == [b1, b2]
    t.allocate_blocks_to_batch(2000)
    assert t.get_blocks_of_batch(2000) == {0: (b1, b2), 1: (c1,)}
    assert t.get_unallocated_blocks(0) == []
    assert t.last_allocated_batch_time_ms == 2000
    # Allocating a time at or before the last one does nothing.
    b3 = block(0)
    t.add_block(b3)
    t.allocate_blocks_to_batch(2000)
    t.allocate_blocks_to_batch(1000)
    assert t.get_unallocated_blocks(0) == [b3]
    assert t.get_blocks_of_batch(2000) == {0: (b1, b2), 1: (c1,)}


def test_every_change_is_logged_before_memory_changes() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    b = block()
    t.add_block(b)
    assert decode_event(wal.records[-1][0]) == BlockAddition(b)  # type: ignore[index]
    t.allocate_blocks_to_batch(2000)
    ev = decode_event(wal.records[-1][0])  # type: ignore[index]
    assert isinstance(ev, BatchAllocation) and ev.as_map() == {0: (b,), 1: ()}


def test_failed_block_write_is_not_added() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    wal.fail_writes = 1
    assert t.add_block(block()) is False
    assert t.get_unallocated_blocks(0) == []


def test_a_re_reported_block_is_kept_once() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    b = block()
    assert t.add_block(b) and t.add_block(b)
    assert t.get_unallocated_blocks(0) == [b]
    # Even when the addition was logged twice (a retried report), replay keeps one.
    wal.records.append(wal.records[0])
    assert tracker_over(MemoryWAL(wal.records)).get_unallocated_blocks(0) == [b]


def test_spark_23991_failed_allocation_write_loses_no_block() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    blocks = [block(0), block(0), block(1)]
    for b in blocks:
        t.add_block(b)
    before = t.state()
    wal.fail_writes = 1
    with pytest.raises(TrackerWriteError):
        t.allocate_blocks_to_batch(2000)
    assert t.state() == before  # nothing dequeued, nothing allocated
    t.allocate_blocks_to_batch(3000)  # the next batch gets them
    assert t.get_blocks_of_batch(3000) == {0: (blocks[0], blocks[1]), 1: (blocks[2],)}
    assert tracker_over(MemoryWAL(wal.records)).state() == t.state()


def test_spark_23438_replay_keeps_blocks_added_after_an_allocation() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    first = [block(0), block(0)]
    for b in first:
        t.add_block(b)
    t.allocate_blocks_to_batch(2000)
    later = [block(0), block(1)]
    for b in later:
        t.add_block(b)
    recovered = tracker_over(MemoryWAL(wal.records))
    # Spark cleared every queue when replaying an allocation, losing these.
    assert recovered.get_unallocated_blocks(0) == [later[0]]
    assert recovered.get_unallocated_blocks(1) == [later[1]]
    assert recovered.get_blocks_of_batch(2000) == {0: tuple(first), 1: ()}
    assert recovered.state() == t.state()


def test_spark_5233_replay_does_not_mix_leftover_blocks_into_new_batches() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    a = [block(0), block(0)]
    for b in a:
        t.add_block(b)
    t.allocate_blocks_to_batch(2000)
    b_late = block(0)
    t.add_block(b_late)
    # Replay must give batch 2000 exactly its blocks, and leave b_late for the next batch.
    recovered = tracker_over(MemoryWAL(wal.records))
    assert recovered.get_blocks_of_batch(2000) == {0: tuple(a), 1: ()}
    recovered.allocate_blocks_to_batch(4000)
    assert recovered.get_blocks_of_batch(4000) == {0: (b_late,), 1: ()}
    assert recovered.get_blocks_of_batch(2000) == {0: tuple(a), 1: ()}
    # Re-allocating an already allocated time after recovery changes nothing.
    recovered.allocate_blocks_to_batch(2000)
    assert recovered.get_blocks_of_batch(2000) == {0: tuple(a), 1: ()}


def test_spark_26734_a_queue_of_100k_blocks_serialises() -> None:
    wal = MemoryWAL()
    t = ReceivedBlockTracker([0], None)  # fill without 100k log writes
    t._wal = wal
    for i in range(100_000):
        t._apply(BlockAddition(ReceivedBlockInfo(0, f"b{i}", 1, RecordHandle("w", 0, i))))
    t.allocate_blocks_to_batch(2000)  # one event naming 100k blocks
    data = wal.records[-1][0]  # type: ignore[index]
    ev = decode_event(data)
    assert isinstance(ev, BatchAllocation) and len(ev.as_map()[0]) == 100_000
    assert encode_event(ev) == data
    recovered = ReceivedBlockTracker([0], MemoryWAL(wal.records))
    assert len(recovered.get_blocks_of_batch(2000)[0]) == 100_000


def test_cleanup_forgets_old_batches_after_logging() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    for time_ms in (2000, 3000, 4000):
        t.add_block(block())
        t.allocate_blocks_to_batch(time_ms)
    t.cleanup_old_batches(3500, wait_for_completion=True)
    assert t.allocated_batch_times() == [4000]
    assert tracker_over(MemoryWAL(wal.records)).state() == t.state()
    wal.fail_writes = 1
    with pytest.raises(TrackerWriteError):
        t.cleanup_old_batches(5000, wait_for_completion=True)
    assert t.allocated_batch_times() == [4000]


def test_a_late_landing_allocation_does_not_double_a_block() -> None:
    """An allocation write that timed out but landed later, then the next allocation
    took the same blocks: replay must give them to the batch the live tracker ran."""
    wal = MemoryWAL()
    t = tracker_over(wal)
    b = block()
    t.add_block(b)
    late = encode_event(BatchAllocation(2000, ((0, (b,)), (1, ()))))
    wal.fail_writes = 1
    with pytest.raises(TrackerWriteError):
        t.allocate_blocks_to_batch(2000)
    wal.records.append((late, 1000))  # the "failed" write lands after all
    t.allocate_blocks_to_batch(3000)
    recovered = tracker_over(MemoryWAL(wal.records))
    assert recovered.state() == t.state()
    assert recovered.get_blocks_of_batch(3000)[0] == (b,)


def test_corrupt_events_are_skipped_and_counted() -> None:
    wal = MemoryWAL()
    t = tracker_over(wal)
    b = block()
    t.add_block(b)
    wal.records.append((b"garbage", 1))
    recovered = tracker_over(MemoryWAL(wal.records))
    assert recovered.corrupt_events == 1
    assert recovered.get_unallocated_blocks(0) == [b]


def test_a_block_addition_without_its_block_is_a_corrupt_event() -> None:
    # The v1 schema makes the block optional (one record type for all three
    # events); such an event raised a bare TypeError from from_dict before.
    data = EVENT_CODEC.encode({"kind": "BLOCK_ADDITION", "block": None, "batch_time_ms": -1,
                               "allocated": [], "cleanup_times_ms": []})
    with pytest.raises(CorruptDataError, match="without its block"):
        decode_event(data)
    wal = MemoryWAL([(data, 1)])
    assert tracker_over(wal).corrupt_events == 1


def test_replay_from_the_kafka_wal_in_a_new_instance(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("tracker")
    t = ReceivedBlockTracker([0, 1], BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, name)))
    try:
        for time_ms in (2000, 3000):
            for s in (0, 1, 0):
                assert t.add_block(block(s))
            t.allocate_blocks_to_batch(time_ms)
        t.add_block(block(1))
        t.cleanup_old_batches(2500, wait_for_completion=True)
        before = t.state()
        recovered = ReceivedBlockTracker(
            [0, 1], BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, name))
        )
        assert recovered.state() == before
        assert before.to_json()["last_allocated_batch_time_ms"] == 3000
        recovered.stop()
    finally:
        t.cleanup_old_batches(2**42, wait_for_completion=True)
        t.stop()
