"""Input DStreams: receivers (through the WAL), queues of RDDs, new files in a directory."""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Any

from driver.block_rdd import block_rdd
from driver.dstream import DStream

if TYPE_CHECKING:
    from driver.streaming_context import StreamingContext
    from receiver.receiver import Receiver


class ReceiverInputDStream(DStream):
    """Data stored by a receiver: a batch is the RDD of the blocks allocated to it."""

    def __init__(self, ssc: StreamingContext, receiver: Receiver, name: str) -> None:
        super().__init__(ssc, ssc._batch_ms, [], f"receiver:{name}")
        self.receiver = receiver
        self.stream_id = ssc._next_receiver_id()

    def compute(self, t: int) -> Any:
        engine = self._ssc._engine
        assert engine is not None
        blocks = engine.tracker.get_blocks_of_batch_and_stream(t, self.stream_id)
        return block_rdd(self._ssc.sparkContext, blocks, engine.config.bootstrap_servers)


class QueueInputDStream(DStream):
    """``queueStream``: one queued RDD per batch (or all of them), else ``default``.

    Like Spark's, its RDDs live only in this driver: a queue stream cannot be
    recovered after a driver crash (use a receiver or Kafka for that).
    """

    def __init__(self, ssc: StreamingContext, rdds: list[Any], one_at_a_time: bool,
                 default: Any) -> None:
        super().__init__(ssc, ssc._batch_ms, [], "queue")
        self.queue: deque[Any] = deque(rdds)
        self.one_at_a_time = one_at_a_time
        self.default = default

    def compute(self, t: int) -> Any:
        sc = self._ssc.sparkContext
        if self.queue:
            if self.one_at_a_time:
                return self.queue.popleft()
            rdds = list(self.queue)
            self.queue.clear()
            return sc.union(rdds)
        return self.default if self.default is not None else sc.emptyRDD()


class FileInputDStream(DStream):
    """New files in a directory: each batch reads the files that appeared up to its time.

    Files present when the stream starts are ignored (Spark's newFilesOnly);
    names starting with ``.`` or ``_`` are skipped (in-progress files).
    """

    def __init__(self, ssc: StreamingContext, directory: str,
                 record_length: int | None = None) -> None:
        super().__init__(ssc, ssc._batch_ms, [],
                         "binaryRecords" if record_length else "textFile")
        self.directory = directory
        self.record_length = record_length
        self.seen: set[str] = set()
        self._primed = False

    def _candidates(self) -> list[tuple[float, str]]:
        out = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith((".", "_")):
                continue
            path = os.path.join(self.directory, name)
            if os.path.isfile(path):
                out.append((os.path.getmtime(path), path))
        return sorted(out)

    def _initialize(self, zero_ms: int) -> None:
        if not self._primed:
            self.seen.update(p for _, p in self._candidates())
            self._primed = True
        super()._initialize(zero_ms)

    def compute(self, t: int) -> Any:
        sc = self._ssc.sparkContext
        new = [p for mtime, p in self._candidates() if p not in self.seen and mtime * 1000 <= t]
        self.seen.update(new)
        if not new:
            return sc.emptyRDD()
        if self.record_length:
            return sc.union([sc.binaryRecords(p, self.record_length) for p in new])
        return sc.textFile(",".join(new))
