"""What the source's offsets mean, as pure functions over the tracker's state.

An offset is ``{"v": 1, "batch": T}``: ``T`` is the time (ms) of a batch
allocation the source logged to its driver WAL, ``-1`` before the first one. The
micro-batch from ``start`` to ``end`` reads every block of every allocation ``t``
with ``start < t <= end``. An allocation is logged before its time is returned
as an offset, and replayed after a driver restart, so an offset names the same
blocks in every incarnation of the driver (Spark's own receiver tracker gives a
batch time the same guarantee). Allocations are made in increasing time order,
so offsets are ordered as Spark needs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from walstream.driver.dstream.block_rdd import group_blocks
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.structured.errors import OffsetError
from walstream.wal.segments import segment_start_of

OFFSET_VERSION = 1
#: The offset before the first allocation: a new query reads every block kept.
BEFORE_FIRST = -1

Allocation = tuple[int, Mapping[int, Sequence[ReceivedBlockInfo]]]


def make_offset(batch_time_ms: int) -> dict[str, int]:
    return {"v": OFFSET_VERSION, "batch": int(batch_time_ms)}


def batch_of(offset: Mapping[str, Any] | None) -> int:
    """The allocation time an offset names; :class:`OffsetError` if this source did
    not make it."""
    if offset is None:
        return BEFORE_FIRST
    try:
        version, batch = offset["v"], offset["batch"]
    except (KeyError, TypeError):
        raise OffsetError(f"offset {offset!r} is not a walstream offset "
                          "({'v': 1, 'batch': <ms>})") from None
    if version != OFFSET_VERSION:
        raise OffsetError(f"offset version {version!r}: this release reads version "
                          f"{OFFSET_VERSION}; upgrade walstream to read it")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < BEFORE_FIRST:
        raise OffsetError(f"offset {offset!r}: 'batch' must be an integer >= -1")
    return batch


def _within(blocks: int, records: int, max_blocks: int | None, max_records: int | None) -> bool:
    return ((max_blocks is None or blocks <= max_blocks)
            and (max_records is None or records <= max_records))


def choose_blocks(queues: Mapping[int, Sequence[ReceivedBlockInfo]],
                  max_blocks: int | None, max_records: int | None
                  ) -> dict[int, list[ReceivedBlockInfo]]:
    """The blocks one allocation takes from the unallocated ``queues``: every one
    without limits; with them, the oldest of each stream in turn (streams in id
    order) while the totals stay within both limits, and at least one block when
    any is queued, so that a block larger than a limit still moves on."""
    chosen: dict[int, list[ReceivedBlockInfo]] = {s: [] for s in sorted(queues)}
    if max_blocks is None and max_records is None:
        return {s: list(queues[s]) for s in sorted(queues)}
    nxt = {s: 0 for s in queues}
    blocks = records = 0
    while True:
        progressed = False
        for s in sorted(queues):
            i = nxt[s]
            if i >= len(queues[s]):
                continue
            b = queues[s][i]
            if blocks and not _within(blocks + 1, records + b.num_records,
                                      max_blocks, max_records):
                return chosen
            chosen[s].append(b)
            nxt[s] = i + 1
            blocks += 1
            records += b.num_records
            progressed = True
        if not progressed:
            return chosen


def end_within(pending: Sequence[Allocation], max_blocks: int | None,
               max_records: int | None) -> int | None:
    """The latest of the ``pending`` allocations (time order, all after the start)
    that a micro-batch may end at within the limits, at least the first one; None
    when there are none."""
    end = None
    blocks = records = 0
    for t, streams in pending:
        blocks += sum(len(bs) for bs in streams.values())
        records += sum(b.num_records for bs in streams.values() for b in bs)
        if end is not None and not _within(blocks, records, max_blocks, max_records):
            break
        end = t
    return end


def blocks_between(allocations: Iterable[Allocation], start: int, end: int
                   ) -> list[ReceivedBlockInfo]:
    """Every block of the allocations ``start < t <= end``: allocation by allocation
    in time order, streams in id order, each stream's blocks in their order."""
    out: list[ReceivedBlockInfo] = []
    for t, streams in sorted(allocations, key=lambda a: a[0]):
        if start < t <= end:
            for s in sorted(streams):
                out.extend(streams[s])
    return out


def plan_partitions(blocks: Sequence[ReceivedBlockInfo], max_partitions: int
                    ) -> list[list[ReceivedBlockInfo]]:
    """``blocks`` cut into at most ``max_partitions`` runs of about equal record
    counts (``0``: one per block): a pure function of the blocks and the limit, so
    a re-run micro-batch reads the same rows in the same partitions."""
    return group_blocks(blocks, max_partitions) if blocks else []


def clean_threshold(end: int, pending: Iterable[ReceivedBlockInfo], now_ms: int,
                    margin_ms: int) -> int:
    """Below what time the logs may be cleaned once the micro-batch ending at ``end``
    is committed.

    ``pending`` are the blocks a later micro-batch still reads (allocated after
    ``end``, or unallocated). Each was stored at or after its segment's start, and
    its addition to the driver WAL was logged after that, so a threshold at or
    below every such start keeps both its block and its addition event. A block
    stored but not yet reported is in no list: ``now - margin`` keeps every one
    stored within the margin (``cleanMarginMs``). Never above ``end + 1``: the
    allocations after ``end`` are logged at or after their times."""
    thresh = min(end + 1, now_ms - margin_ms)
    for b in pending:
        start = segment_start_of(b.handle.topic)
        if start is None:
            # Not a segment topic: where it sits in time is unknown, so nothing
            # below the oldest possible time is cleaned.
            return 0
        thresh = min(thresh, start)
    return max(0, thresh)
