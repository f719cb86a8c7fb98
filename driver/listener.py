"""StreamingListener (``pyspark.streaming.listener`` shape) and the bus that feeds it.

Events are posted to a bounded queue and delivered on one thread, so a slow
listener never blocks batches; when the queue is full, events are dropped and
counted (Spark's LiveListenerBus does the same) rather than growing memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

log = logging.getLogger(__name__)


class StreamingListener:
    """Override the methods you need; each gets one event object (see driver.batch_info)."""

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


class _Event:
    """An event with PySpark's accessor names (``batchInfo()``, ``receiverInfo()``...)."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        try:
            value = self._fields[name]
        except KeyError:
            raise AttributeError(name) from None
        return lambda: value

    def __repr__(self) -> str:
        return f"Event({self._fields})"


def event(**fields: Any) -> Any:
    return _Event(**fields)


_STOP = object()


class ListenerBus:
    def __init__(self, capacity: int = 10_000) -> None:
        self._listeners: list[StreamingListener] = []
        self._queue: queue.Queue[Any] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="listener-bus", daemon=True)
        self._started = False
        self.dropped = 0

    def add(self, listener: StreamingListener) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def post(self, method: str, payload: Any) -> None:
        try:
            self._queue.put_nowait((method, payload))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100, 10_000):
                log.warning("listener bus full: %d events dropped so far", self.dropped)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            method, payload = item
            for listener in list(self._listeners):
                try:
                    getattr(listener, method)(payload)
                except Exception:
                    log.exception("streaming listener %r failed in %s", listener, method)

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
