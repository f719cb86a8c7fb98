"""JobGenerator: every batch interval, allocate the received blocks and run the batch.

Per batch time ``t`` (the order is what makes a re-run deterministic):

1. ``tracker.allocate_blocks_to_batch(t)``: the allocation is logged before it
   takes effect, so after a crash batch ``t`` is rebuilt with the same blocks.
2. Hand ``t`` to the job runner (one thread, batches in time order), which
   builds the batch from ``tracker.get_blocks_of_batch(t)`` and runs it on Spark.

A failed allocation write leaves the blocks queued for the next batch and the
batch runs empty. Job errors are kept and re-raised by :meth:`await_termination`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from driver.errors import JobFailedError, TrackerWriteError
from driver.received_block_tracker import ReceivedBlockTracker
from driver.recurring_timer import RecurringTimer

log = logging.getLogger(__name__)


class JobGenerator:
    def __init__(
        self,
        tracker: ReceivedBlockTracker,
        batch_interval_ms: int,
        run_batch: Callable[[int], None],
        max_pending_batches: int = 1000,
    ) -> None:
        self.tracker = tracker
        self.batch_interval_ms = batch_interval_ms
        self.run_batch = run_batch
        self._timer = RecurringTimer(batch_interval_ms, self._generate_jobs, "job-generator")
        self._jobs: queue.Queue[int | None] = queue.Queue(max_pending_batches)
        self._runner = threading.Thread(target=self._run_jobs, name="job-runner", daemon=True)
        self.errors: list[BaseException] = []
        self.completed: list[int] = []
        self.last_generated_ms: int | None = None
        self._done = threading.Event()

    def start(self) -> int:
        self._runner.start()
        return self._timer.start()

    def _generate_jobs(self, t: int) -> None:
        try:
            self.tracker.allocate_blocks_to_batch(t)
        except TrackerWriteError as exc:
            log.error("batch %d: %s", t, exc)
        self.last_generated_ms = t
        try:
            self._jobs.put(t, timeout=self.batch_interval_ms / 1000 * 10)
        except queue.Full:
            self.errors.append(JobFailedError(f"batch {t}: job queue full, batches too slow"))

    def _run_jobs(self) -> None:
        while True:
            t = self._jobs.get()
            if t is None:
                self._done.set()
                return
            try:
                self.run_batch(t)
                self.completed.append(t)
            except Exception as exc:
                log.error("batch %d failed: %s", t, exc)
                self.errors.append(JobFailedError(f"batch {t} failed: {exc}"))

    def stop(self, drain: Callable[[], bool] | None = None, timeout_s: float = 120.0) -> None:
        """Stop generating; with ``drain``, first keep going until ``drain()`` is true.

        A graceful stop passes ``drain`` = "no unallocated blocks left", so every
        received block is processed before the generator stops.
        """
        deadline = time.monotonic() + timeout_s
        if drain is not None:
            while not drain() and time.monotonic() < deadline:
                time.sleep(self.batch_interval_ms / 1000 / 4)
            # One more batch boundary so the last allocation has run.
            last = self.last_generated_ms
            while self.last_generated_ms == last and time.monotonic() < deadline:
                time.sleep(0.02)
        self._timer.stop()
        self._jobs.put(None)
        self._done.wait(max(0.1, deadline - time.monotonic()))

    def await_termination(self) -> None:
        self._done.wait()
        if self.errors:
            raise self.errors[0]
