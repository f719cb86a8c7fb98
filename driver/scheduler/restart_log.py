"""What a restarted driver logs as it comes back, after the tracker's replay.

At INFO, each once or at most every ``CATCH_UP_LOG_INTERVAL_S``:

* the catch-up after the down time: how many resubmitted batches are to run when
  the job generator starts, then, as batches complete, how many are left (not
  completed yet; a failed one stays left, since a restart re-runs it) with the
  rate and an ETA, and one line when none is left;
* the first batch after the restart that completes, with the time from the
  restart to then: from the start of the tracker's WAL replay
  (:attr:`~walstream.driver.scheduler.received_block_tracker.ReceivedBlockTracker.recovery_stats`),
  the first step of a restarted ``StreamingContext.start``. It is kept in
  :attr:`RestartLog.first_batch_after_restart_s` for the metrics;
* the first completed batch with new data: data this process ingested itself,
  which is what a user waits for after a crash. That is the batch holding the
  first block this process's tracker logged (its receivers' first stored block),
  or a new (not resubmitted) batch with records from a direct stream, whose
  ranges this process fetched; whichever completes first. Kept in
  :attr:`RestartLog.first_new_data_s`.

A start is a restart when the replay found events or batches were resubmitted; a
first start logs none of this. A hot standby that takes over replayed its WAL long
before: its batches are timed from the takeover (:meth:`RestartLog.took_over`) and
also from the old leader's last renewal it read, the latest instant the old
leader is known to have been alive (its fault came after it, by at most the
renewal period).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.progress import ProgressReporter, ProgressSnapshot, format_rate

log = logging.getLogger(__name__)

#: How often the catch-up after a restart logs the resubmitted batches left.
CATCH_UP_LOG_INTERVAL_S = 10.0


class RestartLog:
    """Told of the resubmitted batches and of every completed batch; thread-safe
    (batches complete on the scheduler's threads). ``clock``: wall seconds, the
    tracker's clock."""

    def __init__(self, tracker: ReceivedBlockTracker, clock: Callable[[], float],
                 interval_s: float = CATCH_UP_LOG_INTERVAL_S,
                 driver_streams: Iterable[int] = ()) -> None:
        self.tracker = tracker
        self.clock = clock
        self.interval_s = interval_s
        self.driver_streams = frozenset(driver_streams)
        self.first_batch_after_restart_s: float | None = None
        self.first_new_data_s: float | None = None
        self._restarted_at_s: float | None = None  # what the first-batch line timed from
        self._old_leader_last_seen_s: float | None = None
        self._first_new_ms: int | None = None  # the first batch allocated as new
        self._own_block_batch_ms: int | None = None  # the batch of the first own block
        self._lock = threading.Lock()
        self._any_completed = False
        self._left: set[int] = set()
        self._catch_up: ProgressReporter | None = None
        self._took_over_at_s: float | None = None

    def took_over(self, at_s: float, old_leader_last_seen_s: float | None = None) -> None:
        """This driver took over at ``at_s`` (the clock's seconds) as a standby: its
        first batch is timed from then, not from its replay, and also from
        ``old_leader_last_seen_s`` when known."""
        with self._lock:
            self._took_over_at_s = at_s
            self._old_leader_last_seen_s = old_leader_last_seen_s

    def new_batch_allocated(self, t: int) -> None:
        """Batch ``t`` (not a resubmitted one) has its blocks: does it hold the first
        block this process's tracker logged? Blocks go to the first batch allocated
        after they were logged, so the first allocation checked after that block
        exists is the one that took it."""
        with self._lock:
            if self.first_new_data_s is not None:
                return
            if self._first_new_ms is None:
                self._first_new_ms = t
            first = self.tracker.first_own_block
            if first is None or self._own_block_batch_ms is not None:
                return
            if any(b.block_id == first
                   for blocks in self.tracker.get_blocks_of_batch(t).values() for b in blocks):
                self._own_block_batch_ms = t

    def _holds_new_data(self, t: int, records: Mapping[int, int]) -> bool:
        if self._own_block_batch_ms is not None and t >= self._own_block_batch_ms:
            return True
        return (self._first_new_ms is not None and t >= self._first_new_ms
                and any(records.get(s, 0) > 0 for s in self.driver_streams))

    def _after_old_leader(self, now: float) -> str:
        """``, X s after the old leader's last renewal read`` (empty when unknown)."""
        if self._old_leader_last_seen_s is None:
            return ""
        return f", {now - self._old_leader_last_seen_s:.2f} s after the old leader's " \
               "last renewal read"

    def begin_catch_up(self, times: list[int]) -> None:
        """The job generator starts with these resubmitted batch times (sorted)."""
        if not times:
            return
        with self._lock:
            self._left = set(times)
            self._catch_up = ProgressReporter(self._log_catch_up, self.interval_s, self.clock,
                                              total=len(times), unit="batches")
            self._catch_up.start()
        log.info("catch-up after the down time: %d resubmitted batches to run (%d .. %d)",
                 len(times), times[0], times[-1])

    def batches_left(self) -> int:
        with self._lock:
            return len(self._left)

    def _log_catch_up(self, snap: ProgressSnapshot, final: bool) -> None:
        if final:
            log.info("caught up after the down time: %d resubmitted batches ran in %.1f s",
                     snap.done, snap.elapsed_s)
            return
        eta = snap.eta_s
        log.info("catch-up after the down time: %d of %d resubmitted batches left (%d ran "
                 "in %.1f s, %s batches/s, ETA %s)", len(self._left), snap.total, snap.done,
                 snap.elapsed_s, format_rate(snap.rate),
                 "unknown" if eta is None else f"{eta:.0f} s")

    def batch_completed(self, t: int, records: Mapping[int, int] | None = None) -> None:
        """Batch ``t`` completed, with ``records`` per input stream: the first-batch
        and new-data lines, and the catch-up's batches left."""
        with self._lock:
            now = self.clock()
            if not self._any_completed:
                self._any_completed = True
                stats = self.tracker.recovery_stats
                if self._took_over_at_s is not None:
                    self._restarted_at_s = self._took_over_at_s
                    self.first_batch_after_restart_s = now - self._took_over_at_s
                    log.info("first batch after the takeover completed: batch %d, %.2f s "
                             "after the lease was claimed%s", t,
                             self.first_batch_after_restart_s, self._after_old_leader(now))
                elif stats.events_replayed or self._catch_up is not None:
                    self._restarted_at_s = stats.started_at_s
                    self.first_batch_after_restart_s = now - stats.started_at_s
                    log.info("first batch after the restart completed: batch %d, %.1f s after "
                             "the restart began (WAL replay of %d events: %.1f s)", t,
                             self.first_batch_after_restart_s, stats.events_replayed,
                             stats.seconds)
            if (self._restarted_at_s is not None and self.first_new_data_s is None
                    and self._holds_new_data(t, records or {})):
                self.first_new_data_s = now - self._restarted_at_s
                took_over = self._took_over_at_s is not None
                log.info("first batch with new data after the %s completed: batch %d, "
                         "%.2f s after %s%s", "takeover" if took_over else "restart", t,
                         self.first_new_data_s,
                         "the lease was claimed" if took_over else "the restart began",
                         self._after_old_leader(now))
            if self._catch_up is None or t not in self._left:
                return
            self._left.discard(t)
            if self._left:
                self._catch_up.advance()
            else:
                self._catch_up.done += 1
                self._catch_up.finish()
                self._catch_up = None
