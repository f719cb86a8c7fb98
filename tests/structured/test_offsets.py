"""The offset mapping: offsets name logged allocations; a micro-batch reads the
allocations after its start up to its end; a commit cleans nothing a later
micro-batch still reads."""

from __future__ import annotations

import pytest

from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.structured import offsets
from walstream.structured.errors import OffsetError
from walstream.wal.handle import RecordHandle
from walstream.wal.segments import segment_topic


def block(stream: int, n: int, records: int = 10, seg_start: int = 1_000) -> ReceivedBlockInfo:
    topic = segment_topic("", f"app-receiver-{stream}", seg_start, seg_start + 60_000)
    return ReceivedBlockInfo(stream, f"input-{stream}-{n}", records, RecordHandle(topic, 0, n))


def test_offsets_round_trip_and_foreign_ones_are_refused() -> None:
    assert offsets.batch_of(offsets.make_offset(1234)) == 1234
    assert offsets.batch_of(None) == offsets.BEFORE_FIRST
    for bad in ({"offset": 3}, {"v": 1, "batch": "3"}, {"v": 1, "batch": -2}, [1]):
        with pytest.raises(OffsetError, match=r"walstream offset|'batch'"):
            offsets.batch_of(bad)  # type: ignore[arg-type]
    with pytest.raises(OffsetError, match="version 2"):
        offsets.batch_of({"v": 2, "batch": 5})


def test_choose_blocks_takes_everything_without_limits() -> None:
    q = {0: [block(0, 1), block(0, 2)], 1: [block(1, 1)]}
    assert offsets.choose_blocks(q, None, None) == {0: q[0], 1: q[1]}


def test_choose_blocks_takes_the_oldest_of_each_stream_in_turn_within_the_limits() -> None:
    q = {0: [block(0, i) for i in range(4)], 1: [block(1, i) for i in range(4)]}
    assert offsets.choose_blocks(q, 3, None) == {0: q[0][:2], 1: q[1][:1]}
    assert offsets.choose_blocks(q, None, 45) == {0: q[0][:2], 1: q[1][:2]}
    assert offsets.choose_blocks(q, 10, 25) == {0: q[0][:1], 1: q[1][:1]}


def test_choose_blocks_moves_one_block_larger_than_the_limit() -> None:
    q = {0: [block(0, 0, records=1_000)], 1: []}
    assert offsets.choose_blocks(q, None, 10) == {0: q[0], 1: []}


def test_end_within_answers_pending_allocations_first_and_at_least_one() -> None:
    pending = [(10, {0: [block(0, 0)]}), (20, {0: [block(0, 1)]}), (30, {0: [block(0, 2)]})]
    assert offsets.end_within(pending, None, None) == 30
    assert offsets.end_within(pending, 2, None) == 20
    assert offsets.end_within(pending, None, 5) == 10  # the first even over the limit
    assert offsets.end_within([], None, None) is None


def test_blocks_between_reads_start_exclusive_end_inclusive_in_a_fixed_order() -> None:
    allocs = [(30, {1: [block(1, 3)], 0: [block(0, 3)]}), (10, {0: [block(0, 1)]}),
              (20, {0: [block(0, 2)], 1: [block(1, 2)]})]
    got = offsets.blocks_between(allocs, 10, 30)
    assert [b.block_id for b in got] == ["input-0-2", "input-1-2", "input-0-3", "input-1-3"]
    assert offsets.blocks_between(allocs, 30, 30) == []
    assert [b.block_id for b in offsets.blocks_between(allocs, -1, 10)] == ["input-0-1"]


def test_partitions_are_a_pure_function_of_the_blocks_and_the_limit() -> None:
    blocks = [block(0, i, records=10 * (i + 1)) for i in range(7)]
    first = offsets.plan_partitions(blocks, 3)
    assert first == offsets.plan_partitions(list(blocks), 3)
    assert len(first) == 3 and [b for run in first for b in run] == blocks
    assert offsets.plan_partitions(blocks, 0) == [[b] for b in blocks]
    assert offsets.plan_partitions([], 3) == []


def test_the_clean_threshold_keeps_every_block_a_later_micro_batch_reads() -> None:
    now, margin = 1_000_000, 1_000
    # Nothing pending: up to the committed allocation, and never within the margin.
    assert offsets.clean_threshold(5_000, [], now, margin) == 5_001
    assert offsets.clean_threshold(2_000_000, [], now, margin) == now - margin
    # A block still to be read keeps its segment, however old the commit.
    pending = [block(0, 9, seg_start=3_000), block(1, 2, seg_start=4_000)]
    assert offsets.clean_threshold(5_000, pending, now, margin) == 3_000
    # A handle outside a segment topic: its time is unknown, nothing is cleaned.
    odd = ReceivedBlockInfo(0, "x", 1, RecordHandle("plain-topic", 0, 0))
    assert offsets.clean_threshold(5_000, [odd], now, margin) == 0
