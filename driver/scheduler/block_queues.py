"""The block tracker's memory: each stream's queue of unallocated blocks, each
batch's allocated blocks, and each stream's source positions.

:class:`BlockQueues` changes only through :meth:`~BlockQueues.add`,
:meth:`~BlockQueues.allocate` and :meth:`~BlockQueues.cleanup`, one per tracker
event, which :class:`~walstream.driver.scheduler.received_block_tracker.ReceivedBlockTracker`
calls from its one ``_apply`` live, on replay and on a standby's tail; so replaying
the log rebuilds exactly these queues. Each change is idempotent: a block added
twice is kept once, an allocation applied twice is applied once, and a block that
a later allocation names again moves to that later batch. Not thread-safe: the
tracker's lock guards it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from walstream.driver.scheduler.tracker_events import AllocatedBlocks
from walstream.driver.scheduler.tracker_state import TrackerState
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo

#: Each stream's blocks, by stream id, in queue order.
StreamBlocks = tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]


class BlockQueues:
    """Unallocated blocks per stream, allocated blocks per batch, source positions."""

    def __init__(self, stream_ids: Iterable[int]) -> None:
        self._unallocated: dict[int, OrderedDict[str, ReceivedBlockInfo]] = {
            s: OrderedDict() for s in stream_ids
        }
        self._allocated: dict[int, AllocatedBlocks] = {}
        self.last_allocated: int | None = None
        self._known: set[str] = set()  # ids of blocks unallocated or allocated, not cleaned
        self._positions: dict[int, dict[tuple[str, int], int]] = {}

    # -- the three changes -----------------------------------------------------------

    def add(self, block: ReceivedBlockInfo) -> None:
        """Queue ``block`` and advance its stream's positions; a known block is kept once."""
        if block.block_id in self._known:
            return  # a re-reported or re-logged block is kept once
        self._unallocated.setdefault(block.stream_id, OrderedDict())[block.block_id] = block
        self._known.add(block.block_id)
        self.advance(block.stream_id, block.source)

    def allocate(self, t: int, blocks: AllocatedBlocks) -> None:
        """Give batch ``t`` exactly ``blocks``; a batch allocated already is left alone."""
        if t in self._allocated:
            return
        for stream_id, infos in blocks.items():
            queue = self._unallocated.setdefault(stream_id, OrderedDict())
            for info in infos:
                queued = queue.pop(info.block_id, None) is not None  # exactly these
                if not queued and info.block_id in self._known:
                    # Known but not queued: in an earlier batch (whose allocation
                    # write had failed). Checked only then: scanning every batch
                    # for every block made a replay quadratic in the backlog.
                    self._take_from_earlier_batch(t, stream_id, info.block_id)
                self._known.add(info.block_id)
        self._allocated[t] = blocks
        if self.last_allocated is None or t > self.last_allocated:
            self.last_allocated = t

    def cleanup(self, batch_times_ms: Iterable[int],
                positions: Iterable[tuple[int, Iterable[SourceRange]]]) -> None:
        """Forget the batches ``batch_times_ms`` and keep ``positions`` (never moving back)."""
        for stream_id, ranges in positions:
            self.advance(stream_id, ranges)
        for t in batch_times_ms:
            for infos in self._allocated.pop(t, {}).values():
                self._known.difference_update(i.block_id for i in infos)

    def advance(self, stream_id: int, ranges: Iterable[SourceRange]) -> None:
        pos = self._positions.setdefault(stream_id, {})
        for r in ranges:
            key = (r.topic, r.partition)
            if r.until_offset > pos.get(key, -1):
                pos[key] = r.until_offset

    def _take_from_earlier_batch(self, t: int, stream_id: int, block_id: str) -> None:
        for other_t, streams in list(self._allocated.items()):
            infos = streams.get(stream_id, ())
            if other_t != t and any(i.block_id == block_id for i in infos):
                streams[stream_id] = tuple(i for i in infos if i.block_id != block_id)
                if not any(streams.values()):
                    del self._allocated[other_t]  # an allocation whose write had failed

    # -- reading -----------------------------------------------------------------------

    def knows(self, block_id: str) -> bool:
        """Whether ``block_id`` is queued or allocated (and not cleaned)."""
        return block_id in self._known

    def is_queued(self, stream_id: int, block_id: str) -> bool:
        return block_id in self._unallocated.get(stream_id, {})

    def queued(self) -> StreamBlocks:
        """Every stream's unallocated blocks, oldest first, by stream id."""
        return tuple((s, tuple(q.values())) for s, q in sorted(self._unallocated.items()))

    def queued_of(self, stream_id: int) -> list[ReceivedBlockInfo]:
        return list(self._unallocated.get(stream_id, {}).values())

    def has_queued(self) -> bool:
        return any(self._unallocated.values())

    def blocks_of(self, batch_time_ms: int) -> AllocatedBlocks:
        return dict(self._allocated.get(batch_time_ms, {}))

    def blocks_of_stream(self, batch_time_ms: int,
                         stream_id: int) -> tuple[ReceivedBlockInfo, ...]:
        return tuple(self._allocated.get(batch_time_ms, {}).get(stream_id, ()))

    def allocated_times(self) -> list[int]:
        return sorted(self._allocated)

    def positions(self, stream_id: int) -> tuple[SourceRange, ...]:
        return tuple(SourceRange(t, p, o, o)
                     for (t, p), o in sorted(self._positions.get(stream_id, {}).items()))

    def streams_with_positions(self) -> list[int]:
        return sorted(self._positions)

    def state(self) -> TrackerState:
        return TrackerState(
            unallocated=tuple((s, blocks) for s, blocks in self.queued() if blocks),
            allocated=tuple(
                (t, tuple(sorted((s, tuple(bs)) for s, bs in streams.items())))
                for t, streams in sorted(self._allocated.items())
            ),
            last_allocated_batch_time_ms=self.last_allocated,
        )

    def summary(self) -> str:
        n = sum(len(q) for q in self._unallocated.values())
        return (f"{n} unallocated blocks, {len(self._allocated)} allocated batches, "
                f"last allocated {self.last_allocated}")
