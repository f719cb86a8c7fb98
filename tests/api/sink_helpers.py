"""Hand-written KafkaSink attempts and fences, and raw reads of a sink topic, for
the sink tests (as a task, a new leader or a foreign producer would leave them)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from walstream.driver.sink.kafka_sink import (
    H_ATTEMPT,
    H_BATCH,
    H_COMMIT,
    H_EPOCH,
    H_FENCE,
    H_PART,
    H_SEQ,
    H_WRITER,
    Skipped,
    SkippedAttempt,
    SkippedRecord,
    read_exactly_once,
)

B1, B2 = 1_795_000_001_000, 1_795_000_002_000
W = "app-test/output-0"  # the writer identity of the attempts and fences written here


class Writer:
    """Hand-written attempts and fences, as a task or a new leader would leave them."""

    def __init__(self, bootstrap: str, topic: str, writer: str | None = W) -> None:
        self.topic = topic
        self.writer = writer
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def records(self, attempt: str, seqs: list[int], *, epoch: int | None,
                batch: int = B1, part: int = 0, kafka_part: int = 0) -> None:
        for seq in seqs:
            self.producer.produce(self.topic, f"{attempt}-{seq}".encode(),
                                  partition=kafka_part,
                                  headers=[*self._base(attempt, epoch, batch, part),
                                           (H_SEQ, str(seq).encode())])
        self._sync()

    def commit(self, attempt: str, count: int, *, epoch: int | None, batch: int = B1,
               part: int = 0, kafka_part: int = 0) -> None:
        self.producer.produce(self.topic, b"", partition=kafka_part,
                              headers=[*self._base(attempt, epoch, batch, part),
                                       (H_COMMIT, str(count).encode())])
        self._sync()

    def attempt(self, attempt: str, n: int, *, epoch: int | None, batch: int = B1,
                part: int = 0, kafka_part: int = 0) -> None:
        self.records(attempt, list(range(n)), epoch=epoch, batch=batch, part=part,
                     kafka_part=kafka_part)
        self.commit(attempt, n, epoch=epoch, batch=batch, part=part, kafka_part=kafka_part)

    def fence_one_partition(self, epoch: int, kafka_part: int) -> None:
        self.producer.produce(self.topic, b"", partition=kafka_part,
                              headers=[(H_FENCE, str(epoch).encode()),
                                       *self._writer_header()])
        self._sync()

    def _base(self, attempt: str, epoch: int | None, batch: int,
              part: int) -> list[tuple[str, bytes]]:
        base = [*self._writer_header(), (H_BATCH, str(batch).encode()),
                (H_PART, str(part).encode()), (H_ATTEMPT, attempt.encode())]
        return base if epoch is None else [*base, (H_EPOCH, str(epoch).encode())]

    def _writer_header(self) -> list[tuple[str, bytes]]:
        return [] if self.writer is None else [(H_WRITER, self.writer.encode())]

    def _sync(self) -> None:
        # Each step acknowledged before the next: the partition keeps this order.
        assert self.producer.flush(30) == 0


def read(bootstrap: str, topic: str) -> tuple[list[bytes | None], list[SkippedAttempt]]:
    """The values ``read_exactly_once`` yields and the attempts it skipped; every
    record here is well-formed, so no record may be skipped as malformed."""
    skipped: list[Skipped] = []
    got = [v for _, _, v in read_exactly_once(bootstrap, topic, kafka_conf={},
                                              on_skipped=skipped.append)]
    assert not [s for s in skipped if isinstance(s, SkippedRecord)], skipped
    return got, [s for s in skipped if isinstance(s, SkippedAttempt)]


def raw_records(bootstrap: str, topic: str) -> list[tuple[int, dict[str, bytes]]]:
    """(partition, headers) of every record of ``topic``, read to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, dict[str, bytes]]] = []
        at_end: set[int] = set()
        while len(at_end) < len(parts):
            msg = c.poll(30)
            assert msg is not None, "no record or end of partition within 30 s"
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(int(msg.partition() or 0))
                continue
            at_end.discard(int(msg.partition() or 0))
            headers: Any = msg.headers() or []  # a list of (key, value) from a Consumer
            out.append((int(msg.partition() or 0), {k: bytes(v or b"") for k, v in headers}))
        return out
    finally:
        c.close()
