"""Doubles for the JobScheduler tests: a listener that records every batch and
output-operation event with what its accessors showed on delivery, a scheduler on its
own listener bus (``Env``), and plain-callable jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.driver.helpers import WAIT_S
from walstream.driver.scheduler.batch_info import BatchInfo, OutputOperationInfo
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import ListenerBus, StreamingListener


class Collector(StreamingListener):
    """Records every batch / output-operation event, with what it showed on delivery."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int | None, Any]] = []  # (kind, batch, op id, info)
        self.seen: list[dict[str, Any]] = []  # accessor values read at delivery time
        self.lock = threading.Lock()

    def _batch(self, kind: str, info: BatchInfo) -> None:
        with self.lock:
            self.events.append((kind, info.batchTime(), None, info))
            self.seen.append({"kind": kind, "batch": info.batchTime(),
                              "start": info.processingStartTime(),
                              "end": info.processingEndTime()})

    def _op(self, kind: str, op: OutputOperationInfo) -> None:
        with self.lock:
            self.events.append((kind, op.batchTime(), op.id(), op))
            self.seen.append({"kind": kind, "batch": op.batchTime(), "op": op.id(),
                              "start": op.startTime(), "end": op.endTime(),
                              "failure": op.failureReason()})

    def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
        self._batch("submitted", batchSubmitted.batchInfo())

    def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
        self._batch("started", batchStarted.batchInfo())

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        self._batch("completed", batchCompleted.batchInfo())

    def onOutputOperationStarted(self, outputOperationStarted: Any) -> None:  # noqa: N803
        self._op("op_started", outputOperationStarted.outputOperationInfo())

    def onOutputOperationCompleted(self, outputOperationCompleted: Any) -> None:  # noqa: N803
        self._op("op_completed", outputOperationCompleted.outputOperationInfo())

    def kinds(self, batch: int) -> list[tuple[str, int | None]]:
        return [(k, op) for k, t, op, _ in self.events if t == batch]

    def last(self, kind: str, batch: int) -> Any:
        return [i for k, t, _, i in self.events if k == kind and t == batch][-1]


class Env:
    def __init__(self, concurrent_jobs: int = 1, capacity: int = 10_000) -> None:
        self.bus = ListenerBus(capacity)
        self.collector = Collector()
        self.bus.add(self.collector)
        self.bus.start()
        self.callbacks: list[BatchInfo] = []
        self.scheduler = JobScheduler(self.bus, concurrent_jobs,
                                      on_batch_completed=self.callbacks.append)

    def flush(self) -> None:
        """Wait for the running batches, then deliver every queued event."""
        assert self.scheduler.wait_idle(WAIT_S)
        self.bus.stop(WAIT_S)

    def close(self) -> None:
        self.scheduler.stop(wait_for_jobs=False)
        self.bus.stop(1.0)


def job(t: int, op: int, func: Callable[[], None], name: str | None = None) -> Job:
    return Job(t, op, name or f"op{op}", func, f"description of op{op}")


def sleeper(seconds: float) -> Callable[[], None]:
    return lambda: time.sleep(seconds)
