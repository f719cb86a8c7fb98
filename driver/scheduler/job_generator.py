"""JobGenerator: turns batch times into job sets, and cleans up after them.

An event loop (one thread, bounded queue) handles, as Spark's does, the frozen
event types defined below, dispatched with ``match`` in one place (``_run``):

* :class:`GenerateJobs` ``t``, posted by the recurring timer on every batch
  boundary: (1) allocate the received blocks to ``t`` in the tracker (logged
  first, so a re-run of ``t`` after a crash gets the same blocks:
  docs/ARCHITECTURE.md, invariant 6); (2) ask the graph for the batch's jobs;
  (3) hand them to the JobScheduler; (4) write a checkpoint through
  ``checkpointer(t, None)``. Steps 2-4 wait while a generated batch is still
  waiting to start (at most ``LOOKAHEAD`` ahead of the running one; see below);
  step 1 never waits.
* :class:`RegenerateJobs` ``t``, posted by :meth:`JobGenerator.start` for each
  time :meth:`JobGenerator.resubmit` was given: steps 1-3 only (the restored
  checkpoint already makes ``t`` re-run).
* :class:`ClearMetadata` ``t``, when all jobs of ``t`` finished: checkpoint again
  (now that ``t`` is done), and only after that checkpoint is durable clean the
  tracker's batches and the WALs older than what the graph must remember
  (checkpoint before clean, docs/ARCHITECTURE.md invariant 5); without
  checkpointing, clean at once.
* :class:`WhenDrained` (a graceful stop: run a callback once no batch is
  deferred) and :class:`Stop`.

A failed allocation write leaves the blocks queued for the next batch; the
batch runs with what it was given (nothing).

A failed ``before_allocate(t)`` (a direct stream's end-offset probe while Kafka
is down) is never skipped: it is retried with exponential backoff while the
error is retriable (:func:`retriable`), at most ``allocate_retries`` times
(``spark.walstream.generator.allocateRetries``, default 3) starting at
``allocate_backoff_ms`` (``spark.walstream.generator.allocateRetryBackoff``,
default 200 ms, doubling, at most ``MAX_BACKOFF_S`` per wait). If it still fails,
the generator halts: the error is reported to the scheduler (``awaitTermination``
raises that original error, as Spark's does), no batch at or after ``t`` is
allocated, and ``on_fatal`` is told (the context stops). The batches from ``t``
on belong to the restart, which finds them missed after its checkpoint.

Every other failure of the event loop is reported to the scheduler the same way
(Spark's EventLoop.onError -> JobScheduler.reportError), never only logged.

Why jobs are generated at most ``LOOKAHEAD`` batches ahead (Spark generates every
batch at its time): building a batch's jobs costs the Python driver Py4J round
trips for every DStream of the graph. A restart resubmits every pending batch at
once, and generating them all then would compete with the first recovered batch
for the driver, the JVM and the cores (docs/decisions/one-batch-ahead-job-generator.md).
The allocation (step 1) still happens in time order at once, so each batch holds the
blocks it would have held; the deferred batches are listed as pending by
:meth:`pending_times` (the checkpoint's pending list), and their allocations are
logged, so a crash before they are generated re-runs them (the restart resubmits
a logged allocation whatever the down-time policy). A batch's submission time is
that of its allocation, so scheduling delay (and the rate controller fed by it)
still counts the wait.

A restart's catch-up (the resubmitted batches left) and its first completed batch
are logged by :class:`~walstream.driver.scheduler.restart_log.RestartLog` (``restart_log``).

The event queue is bounded. A full queue blocks the poster (the timer, or the
scheduler reporting a completion) until the loop catches up: that is the
backpressure, and no event is ever dropped, so every batch time is generated
once and every completion is checkpointed and cleaned. Only a stopping
generator abandons a blocked post (its batch times then belong to the restart).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import assert_never

from confluent_kafka import KafkaError, KafkaException

from walstream.driver.errors import TrackerWriteError
from walstream.driver.scheduler.batch_info import BatchInfo
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.recurring_timer import RecurringTimer
from walstream.driver.scheduler.restart_log import CATCH_UP_LOG_INTERVAL_S, RestartLog
from walstream.errors import WalStreamError

log = logging.getLogger(__name__)

JobsForTime = Callable[[int], list[Job]]
#: Batches generated ahead of the running one (submitted, not started); more wait as
#: allocated times until one starts.
LOOKAHEAD = 1
#: How often the loop looks whether a deferred batch may be generated (the next one
#: is generated while the current one runs, so this adds no delay while busy).
DEFER_POLL_S = 0.02
#: After a graceful stop's timeout, how long building the batches still deferred may
#: take (each costs Py4J round trips per DStream).
LAST_FLUSH_S = 60.0
Checkpointer = Callable[[int, Callable[[], None] | None], None]
#: Retries of a failing ``before_allocate`` and the first wait between them (doubling).
DEFAULT_ALLOCATE_RETRIES = 3
DEFAULT_ALLOCATE_BACKOFF_MS = 200
#: The longest wait between two attempts, whatever the doubling reached.
MAX_BACKOFF_S = 5.0
#: Kafka errors that an outage or a leader change causes, and that pass.
_TRANSIENT_KAFKA = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                              KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
                              KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT,
                              KafkaError.NOT_LEADER_FOR_PARTITION,
                              KafkaError.LEADER_NOT_AVAILABLE})


@dataclass(frozen=True)
class GenerateJobs:
    """Batch ``time_ms`` is due (the recurring timer): steps 1-4 of the module docstring."""

    time_ms: int


@dataclass(frozen=True)
class RegenerateJobs:
    """Batch ``time_ms`` was missed or pending before a restart: steps 1-3 only."""

    time_ms: int


@dataclass(frozen=True)
class ClearMetadata:
    """Every job of batch ``time_ms`` finished (Spark's ClearMetadata, posted by
    ``on_batch_completed``): checkpoint, then clean once that checkpoint is durable
    (Spark's DoCheckpoint and ClearCheckpointData folded into this one event)."""

    time_ms: int


@dataclass(frozen=True)
class WhenDrained:
    """Run ``callback`` on the loop once no allocated batch waits to be generated."""

    callback: Callable[[], None]


@dataclass(frozen=True)
class Stop:
    """End the loop; the events queued behind it are not handled."""


GeneratorEvent = GenerateJobs | RegenerateJobs | ClearMetadata | WhenDrained | Stop


def retriable(exc: BaseException) -> bool:
    """Whether preparing a batch again may succeed: Kafka or the network was
    unavailable (timeouts, connection errors, a WAL write that failed, Kafka's
    retriable errors, the direct stream's fetch errors). This project's other
    errors (a stream closed by a stopping context, bad configuration, corrupt
    data) and programming errors are final."""
    if isinstance(exc, TrackerWriteError):
        return True
    if isinstance(exc, WalStreamError):
        return False
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return True
        return not err.fatal() and (err.retriable() or err.code() in _TRANSIENT_KAFKA)
    # Plain RuntimeError: how the direct stream reports a Fetch error (subclasses
    # such as NotImplementedError or RecursionError are bugs).
    return isinstance(exc, OSError) or type(exc) is RuntimeError


class JobGenerator:
    def __init__(
        self,
        tracker: ReceivedBlockTracker,
        batch_interval_ms: int,
        generate_jobs: JobsForTime,
        scheduler: JobScheduler,
        cleanup: Callable[[int], None] | None = None,
        checkpointer: Checkpointer | None = None,
        max_events: int = 10_000,
        before_allocate: Callable[[int], None] | None = None,
        allocate_retries: int = DEFAULT_ALLOCATE_RETRIES,
        allocate_backoff_ms: int = DEFAULT_ALLOCATE_BACKOFF_MS,
        on_fatal: Callable[[BaseException], None] | None = None,
        clock: Callable[[], float] = time.time,
        catch_up_log_interval_s: float = CATCH_UP_LOG_INTERVAL_S,
        driver_streams: Iterable[int] = (),
    ) -> None:
        """``on_fatal(error)`` is called once, on the loop thread, when a batch could
        not be prepared (see the module docstring); it must not wait for the loop.
        ``clock`` (wall seconds, the tracker's clock) times the restart's log lines
        (:class:`~walstream.driver.scheduler.restart_log.RestartLog`); ``driver_streams``: the input
        streams read by the driver (direct streams), not by receivers."""
        self.before_allocate = before_allocate
        self.allocate_retries = max(0, allocate_retries)
        self.allocate_backoff_ms = max(0, allocate_backoff_ms)
        self.on_fatal = on_fatal
        # The error that halted allocation; set once, on the loop thread.
        self.failed: BaseException | None = None
        self.tracker = tracker
        self.batch_interval_ms = batch_interval_ms
        self.generate_jobs = generate_jobs
        self.scheduler = scheduler
        self.cleanup = cleanup
        self.checkpointer = checkpointer
        self._timer = RecurringTimer(batch_interval_ms, self._on_tick, "job-generator-timer")
        self._events: queue.Queue[GeneratorEvent] = queue.Queue(max_events)
        self._loop = threading.Thread(target=self._run, name="job-generator", daemon=True)
        self._resubmitted: list[int] = []
        self.last_generated_ms: int | None = None
        self.last_allocated_ms: int | None = None  # under self._allocated
        self._allocated = threading.Condition()
        self._stopping = threading.Event()
        # Allocated batches whose jobs are not generated yet: (time, checkpoint after
        # generating, allocation wall ms), in time order. Only the loop thread
        # changes it; the lock is for readers on other threads.
        self._deferred: deque[tuple[int, bool, int]] = deque()
        self._deferred_lock = threading.Lock()
        self._on_drained: list[Callable[[], None]] = []
        self._build_all = threading.Event()  # a graceful stop out of time: no lookahead
        self.restart_log = RestartLog(tracker, clock, catch_up_log_interval_s,
                                      driver_streams=driver_streams)
        # Set once a batch completed (or the generator stops).
        self.first_batch_done = threading.Event()

    def start(self, first_time_ms: int | None = None) -> int:
        """Start the loop, queue the resubmitted times, then start the timer (so a
        restart's first new batch follows every resubmitted one); returns the first
        batch time."""
        self._loop.start()
        self.restart_log.begin_catch_up(self._resubmitted)
        # Posted with the loop running: more resubmitted times than the event queue
        # holds (hours of down time under the "all" policy) wait for it, not forever.
        for t in self._resubmitted:
            self._post(RegenerateJobs(t))
        self._resubmitted = []
        return self._timer.start(first_time_ms)

    def resubmit(self, times: list[int]) -> None:
        """Generate jobs for times missed or pending before a restart (in order);
        call before :meth:`start`."""
        self._resubmitted = sorted({*self._resubmitted, *times})

    def _on_tick(self, t: int) -> None:
        self._post(GenerateJobs(t))

    def _post(self, event: GeneratorEvent) -> bool:
        """Queue an event, waiting while the queue is full; False only when stopping."""
        stop = isinstance(event, Stop)
        waited_s = 0.0
        while True:
            try:
                self._events.put(event, timeout=0.5)
                return True
            except queue.Full:
                waited_s += 0.5
                if self._stopping.is_set() and not stop:
                    log.warning("job generator stopping; %s not queued", event)
                    return False
                if stop and not self._loop.is_alive():
                    return False
                if waited_s >= self.batch_interval_ms / 1000 * 10 and waited_s % 10 < 0.5:
                    log.warning("job generator event queue full for %.0f s; %s waits",
                                waited_s, event)

    def on_batch_completed(self, info: BatchInfo) -> None:
        """Wire this to JobScheduler(on_batch_completed=...)."""
        self.restart_log.batch_completed(info.batch_time_ms, info.num_records_per_stream)
        self.first_batch_done.set()
        self._post(ClearMetadata(info.batch_time_ms))

    def pending_times(self) -> list[int]:
        """Batches allocated or submitted and not completed: the checkpoint's pending
        list (the scheduler's running batches plus the deferred ones)."""
        with self._deferred_lock:
            deferred = [t for t, _, _ in self._deferred]
        return sorted(set(self.scheduler.pending_times()) | set(deferred))

    def _run(self) -> None:
        while True:
            self._generate_ready()
            try:
                event = self._events.get(timeout=DEFER_POLL_S if self._deferred else None)
            except queue.Empty:
                continue
            try:
                match event:
                    case Stop():
                        return
                    case GenerateJobs(time_ms=t):
                        self._allocate(t, checkpoint=True)
                    case RegenerateJobs(time_ms=t):
                        self._allocate(t, checkpoint=False)
                    case ClearMetadata(time_ms=t):
                        self._completed(t)
                    case WhenDrained(callback=callback):
                        self._on_drained.append(callback)
                    case _:
                        assert_never(event)
            except Exception as exc:
                self.scheduler.report_error(
                    f"Error in job generator ({event})", exc, original=True)

    def _allocate(self, t: int, checkpoint: bool) -> None:
        """Step 1, in time order and at once: the batch's blocks are fixed (logged) now;
        its jobs follow when :meth:`_generate_ready` gets to it. Once a batch could
        not be prepared, no later one is allocated (it would skip that batch)."""
        if self.failed is not None:
            log.warning("batch %d not allocated: the job generator stopped after batch "
                        "preparation failed (%s)", t, self.failed)
            return
        if self.before_allocate is not None:
            try:
                # Driver-side inputs (direct Kafka streams) log what batch t will read.
                self._before_allocate_with_retries(t)
            except Exception as exc:
                with self._allocated:  # a graceful stop waiting for an allocation gives up
                    self.failed = exc
                    self._allocated.notify_all()
                self.scheduler.report_error(f"Error preparing batch {t}", exc, original=True)
                if self.on_fatal is not None:
                    self.on_fatal(exc)
                return
        try:
            self.tracker.allocate_blocks_to_batch(t)  # logged before it takes effect
        except TrackerWriteError as exc:
            log.error("batch %d: %s", t, exc)
        if checkpoint:  # a new batch, not a resubmitted one
            self.restart_log.new_batch_allocated(t)
        with self._deferred_lock:
            self._deferred.append((t, checkpoint, int(time.time() * 1000)))
        with self._allocated:
            self.last_allocated_ms = t
            self._allocated.notify_all()

    def _before_allocate_with_retries(self, t: int) -> None:
        """``before_allocate(t)``, again after a retriable failure, with bounded
        backoff; raises the last error. A stopping generator stops retrying."""
        assert self.before_allocate is not None
        wait_s = self.allocate_backoff_ms / 1000
        for attempt in range(self.allocate_retries + 1):
            try:
                self.before_allocate(t)
                return
            except Exception as exc:
                if attempt == self.allocate_retries or not retriable(exc):
                    raise
                log.warning("batch %d: preparing its inputs failed (attempt %d of %d), "
                            "retrying in %.1f s: %s", t, attempt + 1,
                            self.allocate_retries + 1, wait_s, exc)
                if self._stopping.wait(wait_s):
                    raise
                wait_s = min(2 * wait_s, MAX_BACKOFF_S)

    def _generate_ready(self) -> None:
        """Steps 2-4 for deferred batches, oldest first, while fewer than ``LOOKAHEAD``
        generated batches wait to start; then run what waited for none to be left."""
        while self._deferred and (self._build_all.is_set()
                                  or self.scheduler.waiting_count() < LOOKAHEAD):
            t, checkpoint, allocated_ms = self._deferred[0]
            try:
                self._generate(t, checkpoint, allocated_ms)
            except Exception as exc:
                self.scheduler.report_error(
                    f"Error in job generator (batch {t})", exc, original=True)
            finally:
                # Only now: a checkpoint written while generating t lists it as pending.
                with self._deferred_lock:
                    self._deferred.popleft()
        if not self._deferred:
            while self._on_drained:
                self._on_drained.pop(0)()

    def _generate(self, t: int, checkpoint: bool, allocated_ms: int) -> None:
        blocks = self.tracker.get_blocks_of_batch(t)
        records = {s: sum(b.num_records for b in bs) for s, bs in blocks.items()}
        try:
            jobs = self.generate_jobs(t)
        except Exception as exc:
            # As Spark: reported to the scheduler, so awaitTermination raises it (a log
            # line alone would let the batch's blocks go by unprocessed, silently).
            self.scheduler.report_error(
                f"Error generating jobs for time {t}", exc, original=True)
            return
        self.scheduler.submit_job_set(jobs, t, records, submitted_ms=allocated_ms)
        if checkpoint and self.checkpointer is not None:
            # A resubmitted time skips this checkpoint: the restored checkpoint already
            # makes it re-run (pending, or after its time), and every later checkpoint
            # is written after t was submitted, so lists it as pending until it
            # completes. Skipping it keeps a restart's backlog of resubmitted times
            # from writing a checkpoint each while the first recovered batch runs
            # (docs/decisions/one-batch-ahead-job-generator.md).
            self.checkpointer(t, None)
        self.last_generated_ms = t

    def _completed(self, t: int) -> None:
        cleanup = self.cleanup
        if self.checkpointer is not None:
            # Checkpoint again (t is no longer pending), also without a cleanup; clean
            # only once that checkpoint, which no longer needs the data, is durable.
            self.checkpointer(t, None if cleanup is None else lambda: cleanup(t))
        elif cleanup is not None:
            cleanup(t)

    def _wait_for_allocation_after(self, t: int | None, timeout_s: float) -> bool:
        """Wait until a batch later than ``t`` was allocated (its jobs maybe not built);
        False at once when allocation halted."""
        deadline = time.monotonic() + timeout_s
        with self._allocated:
            while self.last_allocated_ms is None or (t is not None and
                                                     self.last_allocated_ms <= t):
                if self.failed is not None:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._allocated.wait(left)
        return True

    def stop(self, drain: Callable[[], bool] | None = None, timeout_s: float = 120.0) -> int:
        """Stop the timer (after ``drain()`` holds, batch by batch); return the next time.

        A graceful stop passes ``drain`` = "no unallocated blocks left": batches
        keep being generated until every received block belongs to one; then the
        running batches are waited for and their completion handled.
        """
        deadline = time.monotonic() + timeout_s
        if drain is not None and self.failed is None:
            # A halted generator allocates nothing more: there is nothing to drain into.
            while not drain() and self.failed is None and time.monotonic() < deadline:
                time.sleep(self.batch_interval_ms / 1000 / 4)
            # One more batch time allocated after the drain held takes what came in
            # meanwhile; its jobs may be built later (deferred), which the flush below
            # waits for.
            self._wait_for_allocation_after(self.last_allocated_ms,
                                            max(0.0, deadline - time.monotonic()))
        if drain is None:
            self._stopping.set()  # a timer blocked on a full queue gives up its tick
            self.first_batch_done.set()
        next_time = self._timer.stop()
        if drain is not None:
            # Graceful, as Spark's stop(processAllReceivedData = true): let the batches
            # allocated so far finish, so that their completion (checkpoint, then
            # cleanup) is handled before the loop ends. First let the loop submit what
            # it has queued and deferred, then wait for the scheduler (it queues
            # ClearMetadata events).
            flushed = threading.Event()
            self._post(WhenDrained(flushed.set))
            if not flushed.wait(max(0.0, deadline - time.monotonic())):
                # Out of time: build and submit every batch still deferred at once, so
                # none is dropped (the scheduler's own stop then waits for its jobs).
                with self._deferred_lock:
                    left = [t for t, _, _ in self._deferred]
                log.warning("graceful stop timed out with %d batches not started (%s); "
                            "submitting them all now", len(left), left[:5])
                self._build_all.set()
                flushed.wait(LAST_FLUSH_S)
            self.scheduler.wait_idle(max(0.0, deadline - time.monotonic()))
        self._post(Stop())
        self._loop.join(max(0.1, deadline - time.monotonic()))
        return next_time
