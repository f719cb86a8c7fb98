"""JobScheduler: runs each batch's jobs on Spark and records what happened.

Job sets run on a pool of ``spark.streaming.concurrentJobs`` threads (default
1, so batches run one after another in time order). For each batch it records
a :class:`BatchInfo` (submission, processing start and end, records per
stream, one :class:`OutputOperationInfo` per output operation) and posts
PySpark's listener events. A failed job is recorded with its original error
text and re-raised by :meth:`await_termination`, as ``ssc.awaitTermination``
does; the other batches go on.

A batch with a failed job is not completed (Spark's handleJobCompletion): the
listener still gets ``onBatchCompleted`` with the failure reasons (as Spark
posts it), but ``on_batch_completed`` is never called for it, so its completion
checkpoint and the cleanup after it never happen, and it stays in
:meth:`pending_times` (every later checkpoint lists it, a restart re-runs it),
which also keeps the engine's cleanup from passing it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from walstream.driver.errors import JobFailedError
from walstream.driver.scheduler.batch_info import BatchInfo, OutputOperationInfo
from walstream.driver.scheduler.daemon_pool import DaemonThreadPool
from walstream.driver.scheduler.listener import (
    ListenerBus,
    StreamingListenerBatchCompleted,
    StreamingListenerBatchStarted,
    StreamingListenerBatchSubmitted,
    StreamingListenerOutputOperationCompleted,
    StreamingListenerOutputOperationStarted,
)
from walstream.killpoints import kill_point

log = logging.getLogger(__name__)

_Info = TypeVar("_Info", BatchInfo, OutputOperationInfo)


def _snapshot(info: _Info) -> _Info:
    """What a listener gets: the info as it is now (Spark posts immutable copies), not
    the live object the scheduler keeps filling in while the event sits in the bus."""
    return copy.deepcopy(info)


def _reason(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Job:
    """One output operation of one batch."""

    time_ms: int
    output_op_id: int
    name: str
    func: Callable[[], None]
    description: str = ""


@dataclass
class JobSet:
    time_ms: int
    jobs: list[Job]
    info: BatchInfo
    remaining: int = 0
    failed: bool = False  # a job raised: the batch is never completed
    lock: threading.Lock = field(default_factory=threading.Lock)


class JobScheduler:
    def __init__(
        self,
        bus: ListenerBus | None = None,
        concurrent_jobs: int = 1,
        on_batch_completed: Callable[[BatchInfo], None] | None = None,
        max_retained_batches: int = 1000,
    ) -> None:
        if bus is None:  # our own bus: start it, or its queue fills up unread
            bus = ListenerBus()
            bus.start()
        self.bus = bus
        self._pool = DaemonThreadPool(max(1, concurrent_jobs), "streaming-job")
        self._on_batch_completed = on_batch_completed
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._running: dict[int, JobSet] = {}
        self._failed: dict[int, JobSet] = {}  # done with a failed job: pending for good
        self._finishing = 0  # batches done whose completion callback has not returned
        self.completed: list[BatchInfo] = []  # newest last, at most max_retained_batches
        self._max_retained = max_retained_batches
        self.errors: list[BaseException] = []
        self._stopped = False
        # Called with an output operation's name right before it runs; raises to keep
        # it from running (a highly available leader's lease: driver/ha/output_gate.py).
        self.output_gate: Callable[[str], None] | None = None

    def submit_job_set(self, jobs: list[Job], time_ms: int,
                       records_per_stream: dict[int, int],
                       submitted_ms: int | None = None) -> None:
        """Run ``jobs`` as batch ``time_ms``; ``submitted_ms`` (default now) is its
        submission time in the batch info, from which scheduling delay counts."""
        info = BatchInfo(time_ms, dict(records_per_stream),
                         now_ms() if submitted_ms is None else submitted_ms)
        for job in jobs:
            info.output_operations[job.output_op_id] = OutputOperationInfo(
                time_ms, job.output_op_id, job.name, job.description)
        job_set = JobSet(time_ms, jobs, info, remaining=len(jobs))
        with self._lock:
            if self._stopped:
                log.warning("batch %d not run: the scheduler is stopped", time_ms)
                return
            self._running[time_ms] = job_set
        self.bus.post(StreamingListenerBatchSubmitted(_snapshot(info)))
        if not jobs:
            info.processing_start_time_ms = info.processing_end_time_ms = now_ms()
            self._finish(job_set)
            return
        for job in jobs:
            try:
                self._pool.submit(self._run_job, job_set, job)
            except RuntimeError:  # stop() shut the pool down meanwhile
                log.warning("batch %d not run: the scheduler stopped", time_ms)
                with self._lock:
                    self._running.pop(time_ms, None)
                    self._cond.notify_all()
                return

    def _run_job(self, job_set: JobSet, job: Job) -> None:
        info = job_set.info
        with job_set.lock:
            if info.processing_start_time_ms is None:
                info.processing_start_time_ms = now_ms()
                self.bus.post(StreamingListenerBatchStarted(_snapshot(info)))
        op = info.output_operations[job.output_op_id]
        op.start_time_ms = now_ms()
        self.bus.post(StreamingListenerOutputOperationStarted(_snapshot(op)))
        try:
            gate = self.output_gate
            if gate is not None:
                gate(f"output operation {job.name} of batch {job.time_ms}")
            kill_point("batch.during_output")
            job.func()
        except Exception as exc:
            op.failure_reason = _reason(exc)
            with job_set.lock:
                job_set.failed = True
            # Logged once per batch, with every failed job's reason, by _finish.
            self.report_error(f"Error running job {job.name} of batch {job.time_ms}", exc,
                              logged=False)
        finally:
            op.end_time_ms = now_ms()
            self.bus.post(StreamingListenerOutputOperationCompleted(_snapshot(op)))
            with job_set.lock:
                job_set.remaining -= 1
                last = job_set.remaining == 0
            if last:
                info.processing_end_time_ms = now_ms()
                self._finish(job_set)

    def report_error(self, message: str, exc: BaseException, *, original: bool = False,
                     logged: bool = True) -> None:
        """Record an error (Spark's JobScheduler.reportError): ``await_error`` returns it.

        A job's failure is wrapped in :class:`JobFailedError` (its cause is the
        task's error as Spark reported it). With ``original``, ``exc`` itself is
        returned, ``message`` added as a note, as Spark's ``awaitTermination``
        rethrows the error that stopped the generator. ``logged=False``: the caller
        logs it (a failed job is one line of its batch's failure).
        """
        err: BaseException
        if original:
            exc.add_note(message)
            err = exc
            if logged:
                log.error("%s: %s", message, _reason(exc))
        else:
            err = JobFailedError(f"{message}: {_reason(exc)}")
            err.__cause__ = exc
            if logged:
                log.error("%s", err)
        with self._lock:
            self.errors.append(err)
            self._cond.notify_all()

    def _finish(self, job_set: JobSet) -> None:
        with self._lock:
            self._running.pop(job_set.time_ms, None)
            if job_set.failed:
                # Added before _running loses it (same lock): pending_times never
                # misses it, so no checkpoint or cleanup in between can pass it.
                self._failed[job_set.time_ms] = job_set
            self.completed.append(job_set.info)
            del self.completed[:-self._max_retained]
            self._finishing += 1
        self.bus.post(StreamingListenerBatchCompleted(_snapshot(job_set.info)))
        try:
            if job_set.failed:
                reasons = "; ".join(f"{op.op_name}: {op.failure_reason}"
                                    for op in job_set.info.output_operations.values()
                                    if op.failure_reason)
                log.error("batch %d failed (%s): it is not completed, its data is kept and a "
                          "restart re-runs it", job_set.time_ms, reasons)
            elif self._on_batch_completed is not None:
                self._on_batch_completed(job_set.info)
        except Exception:
            log.exception("batch %d: completion handling failed", job_set.time_ms)
        finally:
            with self._lock:
                self._finishing -= 1
                self._cond.notify_all()

    def pending_times(self) -> list[int]:
        """Batches submitted and not completed: running, waiting, or failed."""
        with self._lock:
            return sorted({*self._running, *self._failed})

    def failed_times(self) -> list[int]:
        """Batches with a failed job (never completed)."""
        with self._lock:
            return sorted(self._failed)

    def waiting_count(self) -> int:
        """Batches submitted whose first job has not started yet."""
        with self._lock:
            return sum(1 for js in self._running.values()
                       if js.info.processing_start_time_ms is None)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no job set is running and every completion callback returned
        (a failed batch is not running: it never completes)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._running or self._finishing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def await_error(self, timeout_s: float | None) -> BaseException | None:
        """Wait for the first reported error (None when none came within the timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self.errors) or self._stopped, timeout_s)
            return self.errors[0] if self.errors else None

    def stop(self, wait_for_jobs: bool = True) -> None:
        with self._lock:
            self._stopped = True
            self._cond.notify_all()
        self._pool.shutdown(wait=wait_for_jobs, cancel_pending=not wait_for_jobs)
