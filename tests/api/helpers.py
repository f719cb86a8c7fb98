"""Helpers modelled on PySpark's streaming test base (``PySparkStreamingTestCase``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from walstream.driver import DStream, StreamingContext, StreamingListener
from walstream.testing import wait_until

# Every wait of these tests (walstream.testing.wait_until) is bounded by this (seconds)
# unless a test passes its own.
TIMEOUT = 60.0
BATCH = 0.5  # seconds: the batch interval of the ``ssc`` fixture


def collect(ssc: StreamingContext, dstream: DStream, n: int, block: bool = True,
            timeout: float = TIMEOUT) -> list[list[Any]]:
    """PySpark's ``_collect``: the first ``n`` non-empty batches of ``dstream``.

    With ``block`` it starts ``ssc``, waits for them (bounded) and stops the
    streaming context (never the SparkContext); else it only registers the output.
    """
    result: list[list[Any]] = []

    def get_output(_: Any, rdd: Any) -> None:
        if rdd and len(result) < n:
            r = rdd.collect()
            if r:
                result.append(r)

    dstream.foreachRDD(get_output)
    if not block:
        return result
    ssc.start()
    try:
        wait_until(lambda: len(result) >= n, timeout, f"{n} batches of output", ssc=ssc)
    finally:
        ssc.stop(stopSparkContext=False)
    return result[:n]


def take(ssc: StreamingContext, dstream: DStream, n: int,
         timeout: float = TIMEOUT) -> list[Any]:
    """PySpark's ``_take``: the first ``n`` records of ``dstream`` over all batches."""
    results: list[Any] = []

    def take_some(_: Any, rdd: Any) -> None:
        if rdd and len(results) < n:
            results.extend(rdd.take(n - len(results)))

    dstream.foreachRDD(take_some)
    ssc.start()
    try:
        wait_until(lambda: len(results) >= n, timeout, f"{n} records", ssc=ssc)
    finally:
        ssc.stop(stopSparkContext=False)
    return results[:n]


def sort_by_key(outputs: list[Any]) -> list[list[Any]]:
    return [sorted(batch, key=lambda kv: kv[0]) for batch in outputs]


def run_func(ssc: StreamingContext, inputs: Sequence[Any],
             func: Callable[..., DStream], expected: list[Any], sort: bool = False,
             inputs2: Sequence[Any] | None = None) -> None:
    """PySpark's ``_test_func``: queue the inputs, apply ``func``, compare batch by batch."""
    sc = ssc.sparkContext
    rdds = [sc.parallelize(d, 1) if isinstance(d, list) else d for d in inputs]
    stream = ssc.queueStream(rdds)
    if inputs2 is not None:
        rdds2 = [sc.parallelize(d, 1) if isinstance(d, list) else d for d in inputs2]
        out = func(stream, ssc.queueStream(rdds2))
    else:
        out = func(stream)
    result = collect(ssc, out, len(expected))
    if sort:
        result, expected = sort_by_key(result), sort_by_key(expected)
    assert result == expected


class BatchInfoCollector(StreamingListener):
    """PySpark's listener test collector: every batch info, by kind of event."""

    def __init__(self) -> None:
        super().__init__()
        self.batchInfosCompleted: list[Any] = []
        self.batchInfosStarted: list[Any] = []
        self.batchInfosSubmitted: list[Any] = []
        self.streamingStarted: list[Any] = []

    def onStreamingStarted(self, streamingStarted: Any) -> None:  # noqa: N803
        self.streamingStarted.append(streamingStarted)

    def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
        self.batchInfosSubmitted.append(batchSubmitted.batchInfo())

    def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
        self.batchInfosStarted.append(batchStarted.batchInfo())

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        self.batchInfosCompleted.append(batchCompleted.batchInfo())


def add_input_stream(ssc: StreamingContext) -> list[list[Any]]:
    """A queue stream of 100 batches with an output, so ``ssc`` can start and runs batches."""
    inputs = [range(1, x) for x in range(101)]
    return collect(ssc, ssc.queueStream(inputs), 1, block=False)


class LineServer:
    """A TCP server that sends ``lines`` on the first connection and keeps it open."""

    def __init__(self, lines: list[str]) -> None:
        self.data = "".join(f"{line}\n" for line in lines).encode()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self.connections:
                conn.sendall(self.data)
            self.connections.append(conn)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for c in self.connections:
            c.close()
        self.sock.close()
