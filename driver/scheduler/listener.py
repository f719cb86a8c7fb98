"""StreamingListener (``pyspark.streaming.listener`` shape), its events, and the bus.

Each event is a frozen dataclass named and shaped as Spark's
``StreamingListener*`` case classes, with the accessor methods a PySpark listener
calls on them (``batchCompleted.batchInfo()``, ``receiverStarted.receiverInfo()``,
``streamingStarted.time()``, ``outputOperationStarted.outputOperationInfo()``), so
a listener written against PySpark works unchanged. The bus maps an event's type
to its callback in one place (:func:`callback_for`).

Events are posted to a bounded queue and delivered on one thread, so a slow
listener never blocks batches; when the queue is full, events are dropped and
counted (Spark's LiveListenerBus does the same) rather than growing memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, assert_never

from walstream.driver.scheduler.batch_info import BatchInfo, OutputOperationInfo, ReceiverInfo

log = logging.getLogger(__name__)


class StreamingListener:
    """Override the methods you need; each gets one event object (defined below)."""

    def onStreamingStarted(self, streamingStarted: Any) -> None:  # noqa: N803
        pass

    def onReceiverStarted(self, receiverStarted: Any) -> None:  # noqa: N803
        pass

    def onReceiverError(self, receiverError: Any) -> None:  # noqa: N803
        pass

    def onReceiverStopped(self, receiverStopped: Any) -> None:  # noqa: N803
        pass

    def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
        pass

    def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
        pass

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        pass

    def onOutputOperationStarted(self, outputOperationStarted: Any) -> None:  # noqa: N803
        pass

    def onOutputOperationCompleted(self, outputOperationCompleted: Any) -> None:  # noqa: N803
        pass


@dataclass(frozen=True)
class StreamingListenerStreamingStarted:
    """The engine started; its first new batch is at ``time_ms`` (``onStreamingStarted``)."""

    time_ms: int

    def time(self) -> int:
        """The first batch time, in milliseconds."""
        return self.time_ms


@dataclass(frozen=True)
class _BatchEvent:
    batch_info: BatchInfo

    def batchInfo(self) -> BatchInfo:  # noqa: N802
        return self.batch_info


@dataclass(frozen=True)
class StreamingListenerBatchSubmitted(_BatchEvent):
    """A batch's jobs were handed to the scheduler (``onBatchSubmitted``)."""


@dataclass(frozen=True)
class StreamingListenerBatchStarted(_BatchEvent):
    """A batch's first job started (``onBatchStarted``)."""


@dataclass(frozen=True)
class StreamingListenerBatchCompleted(_BatchEvent):
    """A batch's last job ended, failed or not (``onBatchCompleted``)."""


@dataclass(frozen=True)
class _OutputOperationEvent:
    output_operation_info: OutputOperationInfo

    def outputOperationInfo(self) -> OutputOperationInfo:  # noqa: N802
        return self.output_operation_info


@dataclass(frozen=True)
class StreamingListenerOutputOperationStarted(_OutputOperationEvent):
    """One output operation of a batch started (``onOutputOperationStarted``)."""


@dataclass(frozen=True)
class StreamingListenerOutputOperationCompleted(_OutputOperationEvent):
    """One output operation of a batch ended (``onOutputOperationCompleted``)."""


@dataclass(frozen=True)
class _ReceiverEvent:
    receiver_info: ReceiverInfo

    def receiverInfo(self) -> ReceiverInfo:  # noqa: N802
        return self.receiver_info


@dataclass(frozen=True)
class StreamingListenerReceiverStarted(_ReceiverEvent):
    """The driver accepted a receiver's registration (``onReceiverStarted``)."""


@dataclass(frozen=True)
class StreamingListenerReceiverError(_ReceiverEvent):
    """A receiver reported an error, or its job ended (``onReceiverError``)."""


@dataclass(frozen=True)
class StreamingListenerReceiverStopped(_ReceiverEvent):
    """A receiver deregistered (``onReceiverStopped``)."""


ReceiverEvent = (StreamingListenerReceiverStarted | StreamingListenerReceiverError
                 | StreamingListenerReceiverStopped)
StreamingListenerEvent = (
    StreamingListenerStreamingStarted
    | StreamingListenerBatchSubmitted | StreamingListenerBatchStarted
    | StreamingListenerBatchCompleted
    | StreamingListenerOutputOperationStarted | StreamingListenerOutputOperationCompleted
    | ReceiverEvent
)


def callback_for(listener: StreamingListener,
                 event: StreamingListenerEvent) -> Callable[[Any], None]:
    """The callback of ``listener`` that ``event`` is delivered to."""
    match event:
        case StreamingListenerStreamingStarted():
            return listener.onStreamingStarted
        case StreamingListenerBatchSubmitted():
            return listener.onBatchSubmitted
        case StreamingListenerBatchStarted():
            return listener.onBatchStarted
        case StreamingListenerBatchCompleted():
            return listener.onBatchCompleted
        case StreamingListenerOutputOperationStarted():
            return listener.onOutputOperationStarted
        case StreamingListenerOutputOperationCompleted():
            return listener.onOutputOperationCompleted
        case StreamingListenerReceiverStarted():
            return listener.onReceiverStarted
        case StreamingListenerReceiverError():
            return listener.onReceiverError
        case StreamingListenerReceiverStopped():
            return listener.onReceiverStopped
        case _:
            assert_never(event)


class _StopDelivery:
    """Queued by :meth:`ListenerBus.stop` behind the events still to deliver."""


_STOP = _StopDelivery()


class ListenerBus:
    def __init__(self, capacity: int = 10_000) -> None:
        self._listeners: list[StreamingListener] = []
        self._queue: queue.Queue[StreamingListenerEvent | _StopDelivery] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="listener-bus", daemon=True)
        self._started = False
        self.dropped = 0

    def add(self, listener: StreamingListener) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def post(self, event: StreamingListenerEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100, 10_000):
                log.warning("listener bus full: %d events dropped so far", self.dropped)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, _StopDelivery):
                return
            for listener in list(self._listeners):
                try:
                    callback_for(listener, item)(item)
                except Exception:
                    log.exception("streaming listener %r failed on %s", listener,
                                  type(item).__name__)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued, then stop."""
        if self._started:
            try:  # bounded too: a hung listener with a full queue must not hang stop()
                self._queue.put(_STOP, timeout=timeout_s)
            except queue.Full:
                log.warning("listener bus: not stopped within %.1fs (a listener hangs)",
                            timeout_s)
                return
            self._thread.join(timeout_s)
