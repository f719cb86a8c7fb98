"""A hot standby's tracker, kept current by following the driver WAL.

The standby applies every record the leader logs, as it lands, with the same
:meth:`~walstream.driver.scheduler.received_block_tracker.ReceivedBlockTracker.apply_logged`
a replay uses, so at a takeover it holds the leader's queues, allocations and source
positions without replaying the log from its start. A record that does not decode
is counted by the tracker and skipped, as in a replay.

Thread model: one daemon thread polls the follower and applies; :meth:`finish`
stops that thread first and then, on the caller's thread, reads the log to the end
it has at that moment. So no record is applied twice or skipped, and when
:meth:`finish` returns the tracker holds everything logged before it was called.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.killpoints import kill_point
from walstream.wal.base import WriteAheadLog
from walstream.wal.errors import FollowGapError

log = logging.getLogger(__name__)

#: The longest one poll waits, so that :meth:`TrackerTail.finish` stops it promptly.
POLL_WAIT_S = 0.05
#: Records applied per poll at most.
POLL_RECORDS = 1000


class TrackerTail:
    """Applies ``follower``'s records (a ``WriteAheadLog.follow()`` of the driver WAL)
    to ``tracker`` in a background thread until :meth:`finish` or :meth:`close`."""

    def __init__(self, tracker: ReceivedBlockTracker, follower: Any) -> None:
        self.tracker = tracker
        self.follower = follower
        self.applied = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver-wal-tail", daemon=True)

    def start(self) -> TrackerTail:
        self._thread.start()
        return self

    @property
    def caught_up(self) -> bool:
        """True when the last poll reached the end of the log the follower knew."""
        return bool(self.follower.caught_up) and self.error is None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self.follower.poll(POLL_RECORDS, POLL_WAIT_S)
            except Exception as exc:  # a closed follower, or the broker gone for good
                if not self._stop.is_set():
                    self.error = exc
                    log.error("standby: following the driver WAL failed: %s", exc)
                return
            for data in records:
                self.tracker.apply_logged(data)
            self.applied += len(records)

    def finish(self, timeout_s: float) -> int:
        """Stop following, then read the log to its end now and apply it; returns the
        records applied in all. Raises the follower's timeout or gap error (a caller
        then replays the log from its start instead)."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"standby: the driver WAL tail did not stop in {timeout_s} s")
        if self.error is not None:
            raise self.error
        started = time.monotonic()
        n = 0
        for data in self.follower.drain_to_end(timeout_s):
            self.tracker.apply_logged(data)
            n += 1
        self.applied += n
        log.info("standby: read the driver WAL to its end: %d more records in %.2f s "
                 "(%d applied while standing by)", n, time.monotonic() - started,
                 self.applied - n)
        return self.applied

    def close(self) -> None:
        self._stop.set()
        self._thread.join(POLL_WAIT_S * 5)
        self.follower.close()


class StandbyTracker:
    """A hot standby's driver WAL and its tail, from standing by to the takeover.

    ``open_wal()`` opens the driver WAL (its chain of epoch logs); ``stream_ids`` are
    the tracker's streams. :meth:`follow` replays the log and follows it;
    :meth:`lead` finishes the tail and cuts the log for a new epoch (takeover steps
    1-3 of :meth:`~walstream.driver.engine.StreamingEngine.take_over`)."""

    def __init__(self, open_wal: Callable[[], WriteAheadLog], stream_ids: list[int]) -> None:
        self._open_wal = open_wal
        self._stream_ids = stream_ids
        self.wal: WriteAheadLog | None = None
        self.tail: TrackerTail | None = None

    def follow(self) -> None:
        """Replay the driver WAL into a tracker and follow it from there (once)."""
        if self.tail is None:
            self.tail = self._tail().start()

    def _tail(self) -> TrackerTail:
        wal = self.wal = self._open_wal()
        tracker = ReceivedBlockTracker(self._stream_ids, wal, recover_from_wal=False)
        return TrackerTail(tracker, wal.follow())

    def prepare_epoch(self, timeout_s: float) -> None:
        """Connect the epoch writer a takeover will use (only slower if this fails:
        ``begin_epoch`` connects it itself)."""
        wal = self.wal
        if wal is None:
            return
        try:
            wal.prepare_epoch(timeout_s)
        except Exception as exc:
            log.warning("standby: the driver WAL's epoch writer is not ready: %s", exc)

    def lead(self, epoch: int, timeout_s: float) -> ReceivedBlockTracker:
        """Finish the tail (1), begin ``epoch``'s log after what it read (2) and log
        the epoch's cut (3); the tracker then holds everything the old leader logged
        before the cut. A follower that met a write out of order in 1
        (``FollowGapError``) is not trusted: the whole chain is replayed instead."""
        self.follow()
        tail, wal = self.tail, self.wal
        assert tail is not None and wal is not None
        try:
            tail.finish(timeout_s)                                             # 1
        except FollowGapError as exc:
            log.warning("takeover: the driver WAL tail met a write out of order (%s); "
                        "replaying the whole log instead", exc)
            tail.close()
            wal.close()
            tail = self._tail()
            wal = self.wal
            assert wal is not None
            tail.finish(timeout_s)
        wal.begin_epoch(epoch, tail.follower)                                  # 2
        tail.follower.close()
        self.tail = None
        kill_point("ha.after_link")  # the epoch's log linked, EpochStarted not logged
        tail.tracker.start_epoch(epoch)                                        # 3
        kill_point("ha.after_epoch_started")  # nothing runs yet: no endpoint, no batch
        return tail.tracker

    def close(self) -> None:
        """Stop following and close the WAL (a standby that never took over)."""
        if self.tail is not None:
            self.tail.close()
        if self.wal is not None:
            self.wal.close()
