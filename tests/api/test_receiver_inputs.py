"""The receiver and Kafka inputs end to end on the session's broker: socketTextStream,
KafkaUtils.createStream (receiver + WAL) and createDirectStream, each a word count
that must count every record exactly once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.api.helpers import TIMEOUT, BatchInfoCollector, LineServer
from walstream.driver import KafkaUtils, StreamingContext
from walstream.testing import wait_until

pytestmark = pytest.mark.spark


@pytest.fixture
def line_server() -> Iterator[Callable[[list[str]], LineServer]]:
    servers: list[LineServer] = []

    def make(lines: list[str]) -> LineServer:
        servers.append(LineServer(lines))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _word_counts(stream: Any) -> Any:
    return stream.flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)) \
        .reduceByKey(lambda a, b: a + b)


def _run_word_count(ssc: StreamingContext, counts_stream: Any, expected: Counter[str],
                    timeout: float = 90.0) -> Counter[str]:
    """Sum each batch's counts until they reach ``expected``; then two more batches,
    which must add nothing (no record counted twice)."""
    totals: Counter[str] = Counter()
    batches: list[int] = []

    def add(rdd: Any) -> None:
        totals.update(dict(rdd.collect()))
        batches.append(1)

    counts_stream.foreachRDD(add)
    ssc.start()
    try:
        wait_until(lambda: sum(totals.values()) >= sum(expected.values()),
                   timeout, f"{sum(expected.values())} words counted", ssc=ssc)
        seen = len(batches)
        wait_until(lambda: len(batches) >= seen + 2, TIMEOUT, "2 more batches", ssc=ssc)
    finally:
        ssc.stop(False)
    return totals


def _lines(n: int) -> list[str]:
    words = ["spark", "kafka", "stream", "wal", "receiver"]
    return [" ".join(words[(i + j) % len(words)] for j in range(i % 4 + 1)) for i in range(n)]


def _expected(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in line.split(" "))


def test_socket_text_stream_word_count(ssc: StreamingContext,
                                       line_server: Callable[[list[str]], LineServer]) -> None:
    lines = _lines(300)
    server = line_server(lines)
    collector = BatchInfoCollector()
    ssc.addStreamingListener(collector)
    stream = ssc.socketTextStream("127.0.0.1", server.port)
    totals = _run_word_count(ssc, _word_counts(stream), _expected(lines))
    assert totals == _expected(lines)
    # Receiver inputs report their records: every line exactly once.
    assert sum(i.numRecords() for i in collector.batchInfosCompleted) == len(lines)


def _produce(bootstrap: str, topic: str, lines: list[str], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        producer.produce(topic, value=line.encode(), key=str(i).encode(),
                         partition=i % partitions)
    assert producer.flush(30) == 0, "not every record was delivered"


def test_kafka_create_stream_word_count(ssc: StreamingContext, bootstrap: str,
                                        topic_factory: Callable[..., str],
                                        unique_name: Callable[[str], str]) -> None:
    topic = topic_factory("words", partitions=2)
    lines = _lines(400)
    _produce(bootstrap, topic, lines, 2)
    stream = KafkaUtils.createStream(ssc, bootstrap, unique_name("group"), {topic: 1},
                                     {"auto.offset.reset": "smallest"})
    totals = _run_word_count(ssc, _word_counts(stream.map(lambda kv: kv[1])), _expected(lines))
    assert totals == _expected(lines)


def test_kafka_create_direct_stream_word_count(ssc: StreamingContext, bootstrap: str,
                                               topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("words", partitions=2)
    lines = _lines(400)
    _produce(bootstrap, topic, lines, 2)
    stream = KafkaUtils.createDirectStream(
        ssc, [topic], {"metadata.broker.list": bootstrap, "auto.offset.reset": "smallest"})
    keys: list[str] = []
    stream.foreachRDD(lambda rdd: keys.extend(rdd.keys().collect()))
    totals = _run_word_count(ssc, _word_counts(stream.map(lambda kv: kv[1])), _expected(lines))
    assert totals == _expected(lines)
    assert sorted(keys, key=int) == [str(i) for i in range(len(lines))]


def test_unioned_socket_streams_read_their_blocks_as_one_block_rdd(
        ssc: StreamingContext, line_server: Callable[[list[str]], LineServer]) -> None:
    # Two receivers (of local[3]'s three task slots), one word count: the union reads
    # both streams' blocks in at most spark.default.parallelism partitions (1 here).
    batches = [_lines(200), _lines(150)]
    streams = [ssc.socketTextStream("127.0.0.1", line_server(lines).port) for lines in batches]
    unioned = ssc.union(*streams)
    partitions: list[int] = []
    unioned.foreachRDD(lambda rdd: partitions.append(rdd.getNumPartitions()))
    expected = _expected([line for lines in batches for line in lines])
    totals = _run_word_count(ssc, _word_counts(unioned), expected)
    assert totals == expected
    assert partitions and max(partitions) <= 1
