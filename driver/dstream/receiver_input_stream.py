"""Input DStreams: receivers (through the WAL) and queues of RDDs (files: driver.file_stream)."""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from walstream.driver.dstream.block_rdd import auto_max_partitions, block_rdd
from walstream.driver.dstream.dstream import DStream, InputDStream
from walstream.driver.scheduler.wal_conf import kafka_settings_of

if TYPE_CHECKING:
    from walstream.driver.dstream.streaming_context import StreamingContext
    from walstream.receiver.receiver import Receiver

log = logging.getLogger(__name__)

class ReceiverInputDStream(InputDStream):
    """Data stored by a receiver: a batch is the RDD of the blocks allocated to it."""

    def __init__(self, ssc: StreamingContext, receiver: Receiver, name: str) -> None:
        super().__init__(ssc, ssc._batch_ms, [], f"receiver:{name}")
        self.receiver = receiver
        self.stream_id = ssc._next_receiver_id()

    def compute(self, t: int) -> Any:
        engine = self._ssc._engine
        assert engine is not None
        blocks = engine.tracker.get_blocks_of_batch_and_stream(t, self.stream_id)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("batch %d, stream %d: %d blocks: %s", t, self.stream_id, len(blocks),
                      " ".join(f"{b.block_id}@{b.handle.topic}:{b.handle.partition}:"
                               f"{b.handle.offset}/{b.num_records}["
                               + ",".join(f"{r.partition}:{r.from_offset}-{r.until_offset}"
                                          for r in b.source) + "]" for b in blocks))
        sc = self._ssc.sparkContext
        limit = engine.config.block_rdd_max_partitions
        if limit is None:
            limit = auto_max_partitions(sc, len(engine.receivers))
        return block_rdd(sc, blocks, engine.config.bootstrap_servers,
                         kafka_settings=kafka_settings_of(engine.config.wal_options),
                         max_partitions=limit)


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

    def __getstate__(self) -> dict[str, Any]:
        import pickle

        raise pickle.PicklingError("queueStream doesn't support checkpointing: its RDDs "
                                   "live only in this driver")
