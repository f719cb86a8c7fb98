"""ReceivedBlockTracker: which blocks are unallocated, which belong to which batch.

Log-before-mutate protocol (docs/ARCHITECTURE.md, invariant 3), for every change:

1. Build the event from the current state *without changing it*.
2. Write the event to the driver WAL and wait until it is durable.
3. Only then apply it to memory, through :meth:`_apply`, the same code replay
   uses. If step 2 raises, the state is exactly as before (the fix for
   SPARK-23991, where a failed allocation write had already dequeued blocks).

Replay (docs/ARCHITECTURE.md, invariant 4: a tracker created over an existing WAL)
applies every logged event with :meth:`_apply` in log order and ends in the state
the dead tracker had, exactly and idempotently (:mod:`.block_queues`): an
allocation takes exactly the blocks it names (SPARK-23438 cleared whole queues;
SPARK-5233 mixed leftover blocks into new batches), and one logged again (a write
that timed out and then landed) is applied once.

A long replay reports its progress at most every ``REPLAY_LOG_INTERVAL_S`` and
once at the end, through a :class:`~walstream.progress.ProgressReporter` (``walstream
inspect`` passes one that draws a bar): events so far, the rate and, from a WAL
that can tell (:meth:`~walstream.wal.base.WriteAheadLog.replay_progress`), the
Kafka records read of their total (counted by offsets, so a replay reading every
segment to its end reaches it exactly) with an ETA. No total of events is shown:
from offsets it would be a guess, since a stored group holds many. What was
replayed is kept in :attr:`ReceivedBlockTracker.recovery_stats`.

Epochs and the fencing cut (docs/decisions/ha-lease-and-fencing.md). Every event
carries its writer's epoch (0 without high availability); the tracker stamps its
own, :attr:`ReceivedBlockTracker.epoch`, on every event it logs. A leader that
takes over logs :class:`~walstream.driver.scheduler.tracker_events.EpochStarted` of its
epoch before anything else it logs as leader (:meth:`ReceivedBlockTracker.start_epoch`). ``_apply``
keeps :attr:`~ReceivedBlockTracker.fence_epoch`, the highest epoch whose
``EpochStarted`` it applied, and enforces, live, on replay and on a standby's
tail (:meth:`~ReceivedBlockTracker.apply_logged`) alike:

* an event of an epoch below ``fence_epoch`` is void: not applied, counted in
  ``fenced_events``, with one WARNING per epoch (a replay's line gives the count);
* an ``EpochStarted`` of an epoch at or below ``fence_epoch`` is ignored (a cut
  logged again after a write that timed out and then landed, or a stale one);
* an event of an epoch above ``fence_epoch`` with no ``EpochStarted`` before it
  is applied. The cut is where the new leader chose to draw it, and it applied
  every event before it (it read the log through its cut before logging anything
  else). Voiding older epochs at the first event of a newer one instead would
  drop events the new leader applied, and replay would no longer equal its state.
  A leader that logs its cut first never writes such an event; one that skips it
  is not fenced against, which is the engine's contract to keep.

Why the cut is exact: the log orders every writer's events, and the rules above
depend only on that order, so every reader (a restart's replay, ``walstream
inspect``, a standby's tail, the new leader reading through its own cut) voids
the same events. What an old leader logged before the cut is applied by all of
them, so nothing it wrote before the takeover is lost; what it logged after is
applied by none, so nothing counts twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from walstream.driver.errors import TrackerFencedError, TrackerWriteError
from walstream.driver.scheduler.block_queues import BlockQueues
from walstream.driver.scheduler.tracker_events import (
    AllocatedBlocks,
    BatchAllocation,
    BatchCleanup,
    BlockAddition,
    EpochStarted,
    TrackerEvent,
    decode_event,
    encode_event,
)
from walstream.driver.scheduler.tracker_state import RecoveryStats, TrackerState, wal_extent
from walstream.errors import ConfigError, CorruptDataError
from walstream.killpoints import kill_point
from walstream.progress import ProgressReporter, ProgressSnapshot, format_rate
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.base import WriteAheadLog
from walstream.wal.errors import WalError

log = logging.getLogger(__name__)

#: Picks an allocation's blocks from the queues (stream id -> its blocks, oldest
#: first); what it returns that is not queued is ignored.
ChooseBlocks = Callable[[Mapping[int, Sequence[ReceivedBlockInfo]]],
                        Mapping[int, Sequence[ReceivedBlockInfo]]]

#: How often a replay logs its progress (and once more at its end).
REPLAY_LOG_INTERVAL_S = 5.0


class ReceivedBlockTracker:
    """Spark's ReceivedBlockTracker with a Kafka WAL (PEP 8 method names).

    Thread-safe: allocations and cleanups hold one lock across log-and-apply, so
    their order in the log is the order in which they changed memory; block
    additions log outside it (see :meth:`add_block`).

    ``epoch`` is stamped on every event this tracker logs (0: no high
    availability); :meth:`start_epoch` logs the cut of a newer one and stamps it
    from then on. A tracker whose epoch is below :attr:`fence_epoch` is fenced:
    every call that would log raises :class:`TrackerFencedError`.
    """

    def __init__(
        self,
        stream_ids: Iterable[int],
        wal: WriteAheadLog | None,
        recover_from_wal: bool = True,
        clock: Callable[[], float] = time.time,
        replay_progress: ProgressReporter | None = None,
        replay_clock: Callable[[], float] = time.monotonic,
        epoch: int = 0,
    ) -> None:
        """``replay_progress`` counts the replay's events (read, corrupt included) and is
        made to follow the WAL's records read (see the module docstring); default: log
        lines at most every :data:`REPLAY_LOG_INTERVAL_S` (by ``replay_clock``) and at
        the end. ``epoch`` (at least 0) is stamped on the events this tracker logs;
        a replay that applies a cut above it leaves the tracker fenced."""
        if epoch < 0:
            raise ConfigError(f"tracker epoch {epoch}: must be at least 0")
        self._wal = wal
        self._clock = clock
        self._lock = threading.RLock()
        self._queues = BlockQueues(stream_ids)
        self._epoch = epoch
        self._fence_epoch = 0
        self._fenced_by_epoch: dict[int, int] = {}
        self._warned_epochs: set[int] = set()
        self._replaying = False
        self.corrupt_events = 0
        self.fenced_events = 0
        #: The id of the first block this tracker logged itself (not replayed): the
        #: first data its own receivers stored, for the restart's log lines.
        self.first_own_block: str | None = None
        self.recovery_stats = RecoveryStats(0, 0, 0.0, clock())
        if wal is not None and recover_from_wal:
            self._recover(replay_progress or ProgressReporter(
                self._log_replay, REPLAY_LOG_INTERVAL_S, replay_clock))

    # -- the log-before-mutate step ------------------------------------------------

    def _log(self, event: TrackerEvent) -> TrackerEvent | None:
        """Stamp ``event`` with this tracker's epoch and write it; the stamped event
        once durable (or when there is no WAL), None when the write failed.

        Raises :class:`TrackerFencedError`, logging nothing, when the tracker is
        fenced: the event would be void. An :class:`EpochStarted` is written as
        given (:meth:`start_epoch` checks it against the cut)."""
        if not isinstance(event, EpochStarted):
            self._refuse_if_fenced()
            if event.epoch != self._epoch:
                event = replace(event, epoch=self._epoch)
        if self._wal is None:
            return event
        try:
            self._wal.write(encode_event(event), int(self._clock() * 1000))
            kill_point("tracker.after_log_before_apply")
            if isinstance(event, BatchAllocation):
                kill_point("tracker.after_allocation_logged")
            return event
        except WalError as exc:
            log.error("tracker: could not log %s: %s", type(event).__name__, exc)
            return None

    def _refuse_if_fenced(self) -> None:
        if self._epoch < self._fence_epoch:
            raise TrackerFencedError(self._epoch, self._fence_epoch)

    def _passes_cut(self, event: TrackerEvent) -> bool:
        """Whether :meth:`_apply` would apply ``event`` now: False for a void event
        (an epoch below the cut) and for an ``EpochStarted`` at or below the cut."""
        if isinstance(event, EpochStarted):
            return event.epoch > self._fence_epoch
        return event.epoch >= self._fence_epoch

    def _apply(self, event: TrackerEvent) -> None:
        """The one place state changes, live, during replay and on a standby's tail.
        An event that does not pass the cut (:meth:`_passes_cut`) changes nothing."""
        if event.epoch < self._fence_epoch:
            self._void(event)
            return
        if isinstance(event, EpochStarted):
            if event.epoch == self._fence_epoch:
                return  # the same cut logged again
            self._fence_epoch = event.epoch
            if 0 < self._epoch < self._fence_epoch:
                # A leader's tracker overtaken; a standby's or an inspection's
                # tracker (epoch 0) never logs, so its cut is no news.
                log.warning("tracker: the driver WAL holds the cut of epoch %d; this "
                            "tracker's epoch %d is fenced and logs nothing more",
                            self._fence_epoch, self._epoch)
            elif not self._replaying:
                log.info("tracker: applied the cut of epoch %d", event.epoch)
            return
        if isinstance(event, BlockAddition):
            self._queues.add(event.block)
        elif isinstance(event, BatchAllocation):
            self._queues.allocate(event.batch_time_ms, event.as_map())
        else:
            self._queues.cleanup(event.batch_times_ms, event.positions)

    def _void(self, event: TrackerEvent) -> None:
        """Count a void event; one WARNING per epoch (a replay gives its count at
        the end instead)."""
        self.fenced_events += 1
        self._fenced_by_epoch[event.epoch] = self._fenced_by_epoch.get(event.epoch, 0) + 1
        if self._replaying or event.epoch in self._warned_epochs:
            return
        self._warned_epochs.add(event.epoch)
        log.warning("tracker: ignoring events of epoch %d logged after the cut of epoch %d "
                    "(their leader was fenced); later ones are counted in fenced_events "
                    "without a line", event.epoch, self._fence_epoch)

    def positions(self, stream_id: int) -> tuple[SourceRange, ...]:
        """Source positions up to which the driver holds this stream's data durably.

        A restarted receiver resumes here: everything before was logged by the
        driver, nothing after was acknowledged, so nothing is stored twice or
        skipped (exactly-once ingestion).
        """
        with self._lock:
            return self._queues.positions(stream_id)

    def streams_with_positions(self) -> list[int]:
        """Every stream the driver holds source positions for (also one whose
        batches were all cleaned: its receiver still resumes there)."""
        with self._lock:
            return self._queues.streams_with_positions()

    def _recover(self, progress: ProgressReporter) -> None:
        assert self._wal is not None
        started_at = self._clock()
        wal = self._wal
        records = wal.read_all()  # the log's replay progress follows this read from now on
        progress.follow(lambda: wal_extent(wal))
        progress.start()
        count = 0
        with self._lock:
            self._replaying = True
            try:
                for data in records:
                    progress.advance()
                    try:
                        event = decode_event(data)
                    except CorruptDataError as exc:
                        self.corrupt_events += 1
                        log.error("tracker: skipping an undecodable event during recovery: "
                                  "%s", exc)
                        continue
                    self._apply(event)
                    count += 1
            finally:
                self._replaying = False
            for epoch, n in sorted(self._fenced_by_epoch.items()):
                self._warned_epochs.add(epoch)
                log.warning("tracker: replay ignored %d events of epoch %d logged after a "
                            "newer epoch's cut (the driver WAL's cut is epoch %d)",
                            n, epoch, self._fence_epoch)
        done = progress.finish()
        self.recovery_stats = RecoveryStats(count, self.corrupt_events, done.elapsed_s,
                                            started_at, self.fenced_events)

    def _log_replay(self, snap: ProgressSnapshot, final: bool) -> None:
        """The default replay sink: a line every few seconds, then the outcome."""
        if not final:
            log.info("tracker: replaying the driver WAL: so far %s", snap.describe())
            return
        if snap.done == 0:
            log.info("tracker: the driver WAL holds no events: starting empty")
            return
        corrupt = f" ({self.corrupt_events} undecodable, skipped)" if self.corrupt_events else ""
        if self.fenced_events:
            corrupt += f" ({self.fenced_events} of fenced epochs, ignored)"
        read = (f", {snap.extent.done:,} of {snap.extent.total:,} {snap.extent.unit}"
                if snap.extent is not None else "")
        log.info("tracker: recovered from %d events%s%s in %.1f s (%s events/s): %s",
                 snap.done - self.corrupt_events, corrupt, read, snap.elapsed_s,
                 format_rate(snap.rate), self._summary())

    def _summary(self) -> str:
        cut = f", cut of epoch {self._fence_epoch}" if self._fence_epoch else ""
        return self._queues.summary() + cut

    # -- epochs, the cut and a standby's tail ----------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch stamped on every event this tracker logs."""
        return self._epoch

    @property
    def fence_epoch(self) -> int:
        """The highest epoch whose ``EpochStarted`` was applied (0: none)."""
        return self._fence_epoch

    @property
    def fenced(self) -> bool:
        """Whether a newer epoch's cut was applied: this tracker logs nothing more."""
        return self._epoch < self._fence_epoch

    def fenced_by_epoch(self) -> dict[int, int]:
        """How many void events each older epoch had (replay and live together)."""
        with self._lock:
            return dict(self._fenced_by_epoch)

    def start_epoch(self, epoch: int) -> None:
        """Log the cut ``EpochStarted(epoch)``, then stamp ``epoch`` on every event.

        ``epoch`` must be above :attr:`fence_epoch` (else :class:`TrackerFencedError`)
        and at least 1 and the tracker's epoch (else :class:`ConfigError`). A write
        that fails raises :class:`TrackerWriteError` and changes nothing; calling
        again is safe: a cut that landed twice is applied once. A cut of ``epoch``
        already applied (a retried call whose first write landed and was read back)
        is adopted without logging again: one lease holder per epoch makes that cut
        this caller's.

        The cut is applied at once, after it is durable (log before apply). Exact
        only when every event logged before the cut is applied here already: a
        takeover first reads the old leader's log to the end it cuts at.
        """
        with self._lock:
            if epoch < 1 or epoch < self._epoch:
                raise ConfigError(f"tracker epoch {epoch}: must be at least 1 and at "
                                  f"least the tracker's epoch {self._epoch}")
            if epoch < self._fence_epoch:
                raise TrackerFencedError(epoch, self._fence_epoch)
            if epoch == self._fence_epoch:
                self._epoch = epoch
                return
            cut = EpochStarted(epoch)
            if self._log(cut) is None:
                raise TrackerWriteError(f"could not log the cut of epoch {epoch}")
            self._epoch = epoch
            self._apply(cut)

    def apply_logged(self, data: bytes) -> bool:
        """Decode one event read from the driver WAL and apply it, as replay does.

        For a standby tailing the log: fed every record after the last one this
        tracker's replay read, in log order, each once. An undecodable record is
        skipped and counted in ``corrupt_events``; a void one (an older epoch's,
        after the cut) in ``fenced_events``. True when the event was applied.

        Once this tracker's own cut is applied, an event of its own epoch (at least
        1) is skipped: only the lease holder of an epoch logs its events, so it is
        one this tracker logged and applied then. Feeding the tail on past the cut is
        therefore harmless; what else follows is void."""
        try:
            event = decode_event(data)
        except CorruptDataError as exc:
            with self._lock:
                self.corrupt_events += 1
            log.error("tracker: skipping an undecodable event from the log's tail: %s", exc)
            return False
        with self._lock:
            if (0 < self._epoch == self._fence_epoch == event.epoch
                    and not isinstance(event, EpochStarted)):
                return False  # this tracker's own, applied when it was logged
            applies = self._passes_cut(event)
            self._apply(event)
            return applies

    # -- Spark's API ---------------------------------------------------------------

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        """Log then queue a reported block; True only once it is durable.

        The write happens outside the lock (as in Spark), so concurrent receivers'
        additions share one batched WAL record instead of queueing behind each
        other. This is safe because an allocation names its blocks explicitly:
        a block logged before an allocation but applied after it stays
        unallocated both live and on replay. A retried report of a block whose
        first report is still in flight is logged twice and applied once.

        Raises :class:`TrackerFencedError` when the tracker is fenced (before
        logging, or when a newer cut reached it while its write was in flight: that
        event is void). False, nothing kept, also for an event stamped with this
        tracker's previous epoch that landed behind its own cut (void too); the
        receiver's retry carries the new epoch.
        """
        with self._lock:
            self._refuse_if_fenced()
            if self._queues.knows(info.block_id):
                return True  # already durable: a retried report
        event = self._log(BlockAddition(info, self._epoch))
        if event is None:
            return False
        with self._lock:
            applies = self._passes_cut(event)
            self._apply(event)
            if applies and self.first_own_block is None:
                self.first_own_block = info.block_id
            if not applies:
                # Logged, then a newer cut reached the tracker first: void.
                self._refuse_if_fenced()
                return False  # an older epoch's write behind this tracker's own cut
        kill_point("tracker.after_add_block_before_answer")
        return True

    def allocate_blocks_to_batch(self, batch_time_ms: int,
                                 choose: ChooseBlocks | None = None) -> None:
        """Give every unallocated block to ``batch_time_ms`` (logged first); with
        ``choose``, the blocks it picks from the queues (each stream's, in order).

        A time at or before the last allocated one does nothing. Raises
        :class:`TrackerWriteError` when the event could not be logged; the
        blocks then stay unallocated for the next batch. Raises
        :class:`TrackerFencedError`, logging nothing, when the tracker is fenced.
        """
        with self._lock:
            last = self._queues.last_allocated
            if last is not None and batch_time_ms <= last:
                # DEBUG: a restart's catch-up meets this for every batch allocated
                # before the crash; the catch-up lines say how far it got.
                log.debug("tracker: batch %d already allocated (last %d); skipping",
                         batch_time_ms, last)
                return
            blocks = self._queues.queued()
            if choose is not None:
                # The event names the chosen blocks, so a replay takes exactly them
                # and leaves the rest queued, as here.
                picked = choose(dict(blocks))
                blocks = tuple((s, tuple(b for b in picked.get(s, ())
                                         if self._queues.is_queued(s, b.block_id)))
                               for s, _ in blocks)
            event = self._log(BatchAllocation(batch_time_ms, blocks, self._epoch))
            if event is None:
                raise TrackerWriteError(
                    f"could not log the allocation of batch {batch_time_ms}; its blocks stay "
                    "queued for the next batch"
                )
            self._apply_own(event)

    def _apply_own(self, event: TrackerEvent) -> None:
        """Apply an event this tracker logged under its lock; it passes the cut, since
        the cut only moves under this lock and ``_log`` checked it."""
        applies = self._passes_cut(event)
        self._apply(event)
        if not applies:
            self._refuse_if_fenced()

    def get_blocks_of_batch(self, batch_time_ms: int) -> AllocatedBlocks:
        with self._lock:
            return self._queues.blocks_of(batch_time_ms)

    def get_blocks_of_batch_and_stream(
        self, batch_time_ms: int, stream_id: int
    ) -> tuple[ReceivedBlockInfo, ...]:
        with self._lock:
            return self._queues.blocks_of_stream(batch_time_ms, stream_id)

    def get_unallocated_blocks(self, stream_id: int) -> list[ReceivedBlockInfo]:
        with self._lock:
            return self._queues.queued_of(stream_id)

    def has_unallocated_blocks(self) -> bool:
        with self._lock:
            return self._queues.has_queued()

    def allocated_batch_times(self) -> list[int]:
        with self._lock:
            return self._queues.allocated_times()

    @property
    def last_allocated_batch_time_ms(self) -> int | None:
        return self._queues.last_allocated

    def cleanup_old_batches(self, thresh_time_ms: int, wait_for_completion: bool,
                            clean_wal_below_ms: int | None = None) -> None:
        """Forget batches older than the threshold (logged first), then clean the WAL
        below it, or below ``clean_wal_below_ms`` when that is lower (a caller whose
        queued blocks' additions may be older than the batches it forgets).

        Raises :class:`TrackerFencedError`, logging and cleaning nothing, when the
        tracker is fenced."""
        with self._lock:
            queues = self._queues
            times = tuple(t for t in queues.allocated_times() if t < thresh_time_ms)
            positions = tuple((s, queues.positions(s)) for s in queues.streams_with_positions())
            event = self._log(BatchCleanup(times, positions, self._epoch))
            if event is None:
                raise TrackerWriteError(f"could not log the cleanup of batches {times}")
            self._apply_own(event)
        if self._wal is not None:
            below = thresh_time_ms if clean_wal_below_ms is None else min(
                thresh_time_ms, clean_wal_below_ms)
            self._wal.clean(below, wait_for_completion)

    def state(self) -> TrackerState:
        with self._lock:
            return self._queues.state()

    def stop(self) -> None:
        if self._wal is not None:
            self._wal.close()
