"""KafkaReceiver: reads source topics and stores ``(key, value)`` pairs.

Each stored record carries its source position ``(topic, partition, offset)``,
so each block carries the offset ranges it holds. Offsets are committed to the
consumer group only in ``on_block_reported``, i.e. after the driver logged the
block (invariant 2). Start positions: after an in-process restart, right after
what this receiver already handed to its supervisor; else the positions the
driver acknowledged (from its registration answer: exactly-once ingestion across
receiver deaths); else ``start_offsets`` when given; else the group's committed
offsets; else ``auto.offset.reset``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, TopicPartition

from receiver.block import SourceRange
from receiver.errors import BlockGeneratorStoppedError
from receiver.items import encode_utf8_pair
from receiver.receiver import Receiver
from walstream.errors import ConfigError
from walstream.kafka_logging import with_logger

log = logging.getLogger(__name__)

Decoder = Callable[[bytes | None], Any]


def utf8_decoder(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


class KafkaReceiver(Receiver):
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topics: dict[str, int],
        kafka_params: dict[str, Any] | None = None,
        start_offsets: dict[tuple[str, int], int] | None = None,
        key_decoder: Decoder = utf8_decoder,
        value_decoder: Decoder = utf8_decoder,
        max_batch_records: int = 10_000,
    ) -> None:
        super().__init__()
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.topics = dict(topics)
        self.kafka_params = dict(kafka_params or {})
        self.start_offsets = dict(start_offsets or {})
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        if max_batch_records < 1:
            raise ConfigError("max_batch_records must be >= 1")
        self.max_batch_records = max_batch_records
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self._commit_lock = threading.Lock()
        self._to_commit: dict[tuple[str, int], int] = {}
        # Next offset per partition after what this process handed to its supervisor
        # (stored or skipped). An in-process restart resumes here: that data is in
        # the supervisor's block generator, which a restart flushes, not loses.
        self._next_offsets: dict[tuple[str, int], int] = {}
        self.undecodable = 0

    def __getstate__(self) -> dict[str, Any]:
        # Receivers are picklable (see Receiver); a lock, a consumer and a thread
        # are not, and belong to the process that runs the receiver anyway.
        state = super().__getstate__()
        # Positions handed to this process's supervisor mean nothing elsewhere.
        state.update(_consumer=None, _thread=None, _commit_lock=None, _next_offsets={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._commit_lock = threading.Lock()

    def _assignment(self, consumer: Consumer) -> list[TopicPartition]:
        md = consumer.list_topics(timeout=30)
        tps = [TopicPartition(t, p) for t in self.topics if t in md.topics
               for p in sorted(md.topics[t].partitions)]
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in consumer.committed(tps, timeout=30)}
        # The driver's acknowledged positions beat the group's commits: a block the
        # driver logged may not be committed yet (we died first), and a commit can
        # never be ahead of the driver.
        acked = self._supervisor.start_positions if self._supervisor is not None else ()
        driver = {(r.topic, r.partition): r.until_offset for r in acked}
        out = []
        for tp in tps:
            key = (tp.topic, tp.partition)
            offset = self._next_offsets.get(
                key, driver.get(key, self.start_offsets.get(
                    key, committed.get(key, OFFSET_INVALID))))
            out.append(TopicPartition(tp.topic, tp.partition, offset))
        return out

    def onStart(self) -> None:
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **self.kafka_params,
        }
        conf["enable.auto.commit"] = False  # commits follow the driver's acknowledgement
        self._consumer = Consumer(with_logger(conf))
        self._consumer.assign(self._assignment(self._consumer))
        self._thread = threading.Thread(target=self._receive, name="kafka-receiver", daemon=True)
        self._thread.start()

    def _batch_size(self) -> int:
        """Records per ``consume`` call: large for throughput, but under a rate limit
        no more than a fifth of a second's worth, so the limit stays smooth."""
        rate = self.supervisor.generator.rate_limit
        if rate > 0:
            return max(1, min(self.max_batch_records, int(rate / 5)))
        return self.max_batch_records

    def _receive(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        stopped = self.stopped_event()
        key_decoder, value_decoder = self.key_decoder, self.value_decoder
        # The default decoders: build each stored item straight from the UTF-8
        # bytes (validated, never decoded to str and encoded back).
        raw_utf8 = key_decoder is utf8_decoder and value_decoder is utf8_decoder
        supervisor = self.supervisor
        try:
            while not stopped.is_set():
                self._commit_reported(consumer)
                msgs = consumer.consume(self._batch_size(), 0.1)
                if not msgs:
                    continue
                items: list[Any] = []
                ranges: dict[tuple[str, int], list[int]] = {}
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.reportError("Kafka consumer error", RuntimeError(err.str()))
                        continue
                    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                    assert topic is not None and partition is not None and offset is not None
                    # A skipped record still counts as handled: its position is in
                    # the batch's ranges, acknowledged with the batch's block.
                    r = ranges.get((topic, partition))
                    if r is None:
                        ranges[(topic, partition)] = [offset, offset + 1]
                    else:
                        r[1] = offset + 1
                    try:
                        if raw_utf8:
                            items.append(encode_utf8_pair(msg.key(), msg.value()))
                        else:
                            items.append((key_decoder(msg.key()), value_decoder(msg.value())))
                    except Exception as exc:  # an undecodable payload: report, skip, go on
                        self.undecodable += 1
                        self.reportError(
                            f"undecodable record at {(topic, partition, offset)} skipped", exc)
                if not ranges:
                    continue
                # One block holds the whole batch, so the batch's positions are
                # acknowledged only after all of its records are stored (invariant 2).
                source = tuple(
                    SourceRange(t, p, lo, hi) for (t, p), (lo, hi) in sorted(ranges.items()))
                if raw_utf8:
                    supervisor.push_many_encoded(items, source)
                else:
                    self.storeMany(items, source)
                for key, (_, hi) in ranges.items():
                    self._next_offsets[key] = hi
        except BlockGeneratorStoppedError:
            pass  # the supervisor is stopping
        except Exception as exc:
            self.restart("Kafka receiver failed", exc)

    def onStop(self) -> None:
        # onStop may run on the receiving thread itself (a stop on a bad record
        # with bad_record_policy="fail"): joining it would raise and skip the close.
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
            self._thread = None
        if self._consumer is not None:
            self._commit_reported(self._consumer)
            self._consumer.close()  # close() waits for outstanding commits
            self._consumer = None

    def on_block_reported(self, block_id: str, metadata: Any) -> None:
        """Commit the block's source ranges: the driver has logged the block.

        Asynchronous: the authoritative positions are the ones in the driver's
        WAL (a block's source ranges); the group commit makes progress visible to
        Kafka tooling and is the start position when the driver has none.
        """
        ranges: tuple[SourceRange, ...] = metadata or ()
        with self._commit_lock:
            for r in ranges:
                key = (r.topic, r.partition)
                self._to_commit[key] = max(self._to_commit.get(key, 0), r.until_offset)

    def _commit_reported(self, consumer: Consumer) -> None:
        """Commit what the driver acknowledged, from the consumer's own thread."""
        with self._commit_lock:
            pending, self._to_commit = self._to_commit, {}
        if pending:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(pending.items())],
                asynchronous=True,
            )
