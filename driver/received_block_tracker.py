"""ReceivedBlockTracker: which blocks are unallocated, which belong to which batch.

Log-before-mutate protocol (docs/ARCHITECTURE.md, invariant 3), for every change:

1. Build the event from the current state *without changing it*.
2. Write the event to the driver WAL and wait until it is durable.
3. Only then apply it to memory, through :meth:`_apply`, the same code replay
   uses. If step 2 raises, the state is exactly as before (the fix for
   SPARK-23991, where a failed allocation write had already dequeued blocks).

Replay (docs/ARCHITECTURE.md, invariant 4: a tracker created over an existing WAL)
applies every logged event with :meth:`_apply` in log order and ends in the state
the dead tracker had. It is
exact and idempotent: a block added twice is kept once; an allocation takes
exactly the blocks it names from the queues (SPARK-23438 cleared whole queues;
SPARK-5233 mixed leftover blocks into new batches); an allocation logged again
(a write that timed out and then landed) is applied once, and a block that a
later allocation names again belongs to that later batch, which is what the
live tracker ran after the earlier write failed.

A long replay reports its progress as it goes at most every
``REPLAY_LOG_INTERVAL_S`` and once at the end, through a
:class:`~walstream.progress.ProgressReporter` (a caller such as ``walstream
inspect`` may pass its own, drawing a progress bar): events so far, the rate,
and, from a WAL that can tell (:meth:`~wal.base.WriteAheadLog.replay_progress`:
a Kafka WAL, also under the batched and forwarding wrappers), the WAL records
read of their total, its percentage and an ETA from that fraction and the time
so far. That total counts Kafka records, taken from the segments' end offsets as
the replay starts, and the records read are counted by offsets, so a replay that
reads every segment to its end reaches it exactly, however many events a stored
group holds and however many chunks a record was split into.
The total of events is not known before the end, for that same reason: a total
of events from the offsets would be a guess, and none is shown. A WAL that cannot
tell (the in-memory test WAL) gives lines that say the total is not known. What
was replayed is kept in :attr:`ReceivedBlockTracker.recovery_stats`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from driver.errors import TrackerWriteError
from driver.events import (
    AllocatedBlocks,
    BatchAllocation,
    BatchCleanup,
    BlockAddition,
    TrackerEvent,
    decode_event,
    encode_event,
)
from receiver.block import SourceRange
from receiver.block_info import ReceivedBlockInfo
from wal.base import WriteAheadLog
from wal.errors import WalError
from walstream.errors import CorruptDataError
from walstream.killpoints import kill_point
from walstream.progress import Extent, ProgressReporter, ProgressSnapshot, format_rate

log = logging.getLogger(__name__)

#: How often a replay logs its progress (and once more at its end).
REPLAY_LOG_INTERVAL_S = 5.0


@dataclass(frozen=True)
class RecoveryStats:
    """What the tracker's WAL replay did: events applied, undecodable events skipped,
    how long it took, and when it began (wall clock, seconds; the tracker's clock).
    All zero, beginning at construction, when no replay ran."""

    events_replayed: int
    corrupt_events: int
    seconds: float
    started_at_s: float


@dataclass(frozen=True)
class TrackerState:
    """A plain, comparable snapshot of the tracker (for tests and ``walstream inspect``)."""

    unallocated: tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]
    allocated: tuple[tuple[int, tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]], ...]
    last_allocated_batch_time_ms: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "unallocated": {str(s): [b.block_id for b in bs] for s, bs in self.unallocated},
            "allocated": {
                str(t): {str(s): [b.block_id for b in bs] for s, bs in streams}
                for t, streams in self.allocated
            },
            "last_allocated_batch_time_ms": self.last_allocated_batch_time_ms,
        }


def wal_extent(wal: WriteAheadLog) -> Extent | None:
    """How far ``wal``'s latest ``read_all`` got in its records of a known total;
    None when the log cannot tell (see :meth:`~wal.base.WriteAheadLog.replay_progress`)."""
    replay = wal.replay_progress()
    if replay is None or replay.total is None:
        return None
    return Extent(replay.consumed, replay.total)


class ReceivedBlockTracker:
    """Spark's ReceivedBlockTracker with a Kafka WAL (PEP 8 method names).

    Thread-safe: allocations and cleanups hold one lock across log-and-apply, so
    their order in the log is the order in which they changed memory; block
    additions log outside it (see :meth:`add_block`).
    """

    def __init__(
        self,
        stream_ids: Iterable[int],
        wal: WriteAheadLog | None,
        recover_from_wal: bool = True,
        clock: Callable[[], float] = time.time,
        replay_progress: ProgressReporter | None = None,
        replay_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``replay_progress`` counts the replay's events (read, corrupt included) and is
        made to follow the WAL's records read (see the module docstring); default: log
        lines at most every :data:`REPLAY_LOG_INTERVAL_S` (by ``replay_clock``) and at
        the end."""
        self._wal = wal
        self._clock = clock
        self._lock = threading.RLock()
        self._unallocated: dict[int, OrderedDict[str, ReceivedBlockInfo]] = {
            s: OrderedDict() for s in stream_ids
        }
        self._allocated: dict[int, AllocatedBlocks] = {}
        self._last_allocated: int | None = None
        self._known: set[str] = set()  # ids of blocks unallocated or allocated, not cleaned
        self._positions: dict[int, dict[tuple[str, int], int]] = {}
        self.corrupt_events = 0
        self.recovery_stats = RecoveryStats(0, 0, 0.0, clock())
        if wal is not None and recover_from_wal:
            self._recover(replay_progress or ProgressReporter(
                self._log_replay, REPLAY_LOG_INTERVAL_S, replay_clock))

    # -- the log-before-mutate step ------------------------------------------------

    def _log(self, event: TrackerEvent) -> bool:
        """Write ``event``; True when durable (or when there is no WAL)."""
        if self._wal is None:
            return True
        try:
            self._wal.write(encode_event(event), int(self._clock() * 1000))
            kill_point("tracker.after_log_before_apply")
            if isinstance(event, BatchAllocation):
                kill_point("tracker.after_allocation_logged")
            return True
        except WalError as exc:
            log.error("tracker: could not log %s: %s", type(event).__name__, exc)
            return False

    def _apply(self, event: TrackerEvent) -> None:
        """The one place state changes, live and during replay."""
        if isinstance(event, BlockAddition):
            b = event.block
            if b.block_id in self._known:
                return  # a re-reported or re-logged block is kept once
            self._unallocated.setdefault(b.stream_id, OrderedDict())[b.block_id] = b
            self._known.add(b.block_id)
            self._advance(b.stream_id, b.source)
        elif isinstance(event, BatchAllocation):
            t = event.batch_time_ms
            if t in self._allocated:
                return
            blocks = event.as_map()
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
            if self._last_allocated is None or t > self._last_allocated:
                self._last_allocated = t
        else:
            for stream_id, ranges in event.positions:
                self._advance(stream_id, ranges)
            for t in event.batch_times_ms:
                for infos in self._allocated.pop(t, {}).values():
                    self._known.difference_update(i.block_id for i in infos)

    def _advance(self, stream_id: int, ranges: Iterable[SourceRange]) -> None:
        pos = self._positions.setdefault(stream_id, {})
        for r in ranges:
            key = (r.topic, r.partition)
            if r.until_offset > pos.get(key, -1):
                pos[key] = r.until_offset

    def positions(self, stream_id: int) -> tuple[SourceRange, ...]:
        """Source positions up to which the driver holds this stream's data durably.

        A restarted receiver resumes here: everything before was logged by the
        driver, nothing after was acknowledged, so nothing is stored twice or
        skipped (exactly-once ingestion).
        """
        with self._lock:
            return tuple(SourceRange(t, p, o, o)
                         for (t, p), o in sorted(self._positions.get(stream_id, {}).items()))

    def streams_with_positions(self) -> list[int]:
        """Every stream the driver holds source positions for (also one whose
        batches were all cleaned: its receiver still resumes there)."""
        with self._lock:
            return sorted(self._positions)

    def _take_from_earlier_batch(self, t: int, stream_id: int, block_id: str) -> None:
        for other_t, streams in list(self._allocated.items()):
            infos = streams.get(stream_id, ())
            if other_t != t and any(i.block_id == block_id for i in infos):
                streams[stream_id] = tuple(i for i in infos if i.block_id != block_id)
                if not any(streams.values()):
                    del self._allocated[other_t]  # an allocation whose write had failed

    def _recover(self, progress: ProgressReporter) -> None:
        assert self._wal is not None
        started_at = self._clock()
        wal = self._wal
        records = wal.read_all()  # the log's replay progress follows this read from now on
        progress.follow(lambda: wal_extent(wal))
        progress.start()
        count = 0
        for data in records:
            progress.advance()
            try:
                event = decode_event(data)
            except CorruptDataError as exc:
                self.corrupt_events += 1
                log.error("tracker: skipping an undecodable event during recovery: %s", exc)
                continue
            self._apply(event)
            count += 1
        done = progress.finish()
        self.recovery_stats = RecoveryStats(count, self.corrupt_events, done.elapsed_s,
                                            started_at)

    def _log_replay(self, snap: ProgressSnapshot, final: bool) -> None:
        """The default replay sink: a line every few seconds, then the outcome."""
        if not final:
            log.info("tracker: replaying the driver WAL: so far %s", snap.describe())
            return
        if snap.done == 0:
            log.info("tracker: the driver WAL holds no events: starting empty")
            return
        corrupt = f" ({self.corrupt_events} undecodable, skipped)" if self.corrupt_events else ""
        read = (f", {snap.extent.done:,} of {snap.extent.total:,} {snap.extent.unit}"
                if snap.extent is not None else "")
        log.info("tracker: recovered from %d events%s%s in %.1f s (%s events/s): %s",
                 snap.done - self.corrupt_events, corrupt, read, snap.elapsed_s,
                 format_rate(snap.rate), self._summary())

    def _summary(self) -> str:
        n = sum(len(q) for q in self._unallocated.values())
        return (f"{n} unallocated blocks, {len(self._allocated)} allocated batches, "
                f"last allocated {self._last_allocated}")

    # -- Spark's API ---------------------------------------------------------------

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        """Log then queue a reported block; True only once it is durable.

        The write happens outside the lock (as in Spark), so concurrent receivers'
        additions share one batched WAL record instead of queueing behind each
        other. This is safe because an allocation names its blocks explicitly:
        a block logged before an allocation but applied after it stays
        unallocated both live and on replay. A retried report of a block whose
        first report is still in flight is logged twice and applied once.
        """
        with self._lock:
            if info.block_id in self._known:
                return True  # already durable: a retried report
        event = BlockAddition(info)
        if not self._log(event):
            return False
        with self._lock:
            self._apply(event)
        kill_point("tracker.after_add_block_before_answer")
        return True

    def allocate_blocks_to_batch(self, batch_time_ms: int) -> None:
        """Give every unallocated block to ``batch_time_ms`` (logged first).

        A time at or before the last allocated one does nothing. Raises
        :class:`TrackerWriteError` when the event could not be logged; the
        blocks then stay unallocated for the next batch.
        """
        with self._lock:
            if self._last_allocated is not None and batch_time_ms <= self._last_allocated:
                # DEBUG: a restart's catch-up meets this for every batch allocated
                # before the crash; the catch-up lines say how far it got.
                log.debug("tracker: batch %d already allocated (last %d); skipping",
                         batch_time_ms, self._last_allocated)
                return
            blocks = tuple(
                (s, tuple(q.values())) for s, q in sorted(self._unallocated.items())
            )
            event = BatchAllocation(batch_time_ms, blocks)
            if not self._log(event):
                raise TrackerWriteError(
                    f"could not log the allocation of batch {batch_time_ms}; its blocks stay "
                    "queued for the next batch"
                )
            self._apply(event)

    def get_blocks_of_batch(self, batch_time_ms: int) -> AllocatedBlocks:
        with self._lock:
            return dict(self._allocated.get(batch_time_ms, {}))

    def get_blocks_of_batch_and_stream(
        self, batch_time_ms: int, stream_id: int
    ) -> tuple[ReceivedBlockInfo, ...]:
        with self._lock:
            return tuple(self._allocated.get(batch_time_ms, {}).get(stream_id, ()))

    def get_unallocated_blocks(self, stream_id: int) -> list[ReceivedBlockInfo]:
        with self._lock:
            return list(self._unallocated.get(stream_id, {}).values())

    def has_unallocated_blocks(self) -> bool:
        with self._lock:
            return any(self._unallocated.values())

    def allocated_batch_times(self) -> list[int]:
        with self._lock:
            return sorted(self._allocated)

    @property
    def last_allocated_batch_time_ms(self) -> int | None:
        return self._last_allocated

    def cleanup_old_batches(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        """Forget batches older than the threshold (logged first), then clean the WAL."""
        with self._lock:
            times = tuple(sorted(t for t in self._allocated if t < thresh_time_ms))
            positions = tuple((s, self.positions(s)) for s in sorted(self._positions))
            event = BatchCleanup(times, positions)
            if not self._log(event):
                raise TrackerWriteError(f"could not log the cleanup of batches {times}")
            self._apply(event)
        if self._wal is not None:
            self._wal.clean(thresh_time_ms, wait_for_completion)

    def state(self) -> TrackerState:
        with self._lock:
            return TrackerState(
                unallocated=tuple(
                    (s, tuple(q.values())) for s, q in sorted(self._unallocated.items()) if q
                ),
                allocated=tuple(
                    (t, tuple(sorted((s, tuple(bs)) for s, bs in streams.items())))
                    for t, streams in sorted(self._allocated.items())
                ),
                last_allocated_batch_time_ms=self._last_allocated,
            )

    def stop(self) -> None:
        if self._wal is not None:
            self._wal.close()
