"""The ``walstream`` format in a real SparkSession: rows arrive, the Kafka source's
rows carry keys, a bad option fails the query with its name, and ``query.stop()``
leaves no receiver running."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

import walstream.structured.registry as registry
from walstream.kafka_logging import with_logger
from walstream.testing import wait_until
from walstream.testing.fixtures import KafkaBroker, walstream_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark(broker: KafkaBroker) -> Iterator[Any]:
    with walstream_session(broker.bootstrap, "structured-query") as session:
        yield session


def rows_of(spark: Any, table: str) -> list[Any]:
    return spark.sql(f"select * from {table}").collect()


def no_engines() -> bool:
    reg = registry._registry
    return reg is not None and not reg._engines and not reg._stopping


def test_rows_arrive_and_query_stop_leaves_no_receiver_running(
    spark: Any, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("seq")
    df = (spark.readStream.format("walstream").option("name", name)
          .option("receiver", "walstream.testing.sequence_receiver:SequenceReceiver")
          .option("receiver.args", json.dumps({"total": 300, "rate": 1000}))
          .option("maxBlocksPerTrigger", "2").load())
    assert [f.name for f in df.schema.fields] == [
        "value", "stream_id", "block_id", "received_time"]
    query = df.writeStream.format("memory").queryName(name.replace("-", "_")).start()
    try:
        wait_until(lambda: len(rows_of(spark, query.name)) >= 300, 120, "300 rows",
                   poll_s=0.5)
    finally:
        query.stop()
    rows = rows_of(spark, query.name)
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(
        f"item-{i}" for i in range(300))
    assert {r.stream_id for r in rows} == {0}
    assert all(r.block_id.startswith("input-0-") and r.received_time for r in rows)
    # The reader process ended with the query: its engine and receiver stop too.
    wait_until(no_engines, 60, "the source's engine to stop", poll_s=0.2)
    tracker = spark.sparkContext.statusTracker()
    wait_until(lambda: not tracker.getActiveJobsIds(), 60, "no Spark job running (the "
               "receiver's is one)", poll_s=0.2)


def test_the_kafka_source_gives_keyed_string_rows(
    spark: Any, bootstrap: str, topic_factory: Callable[..., str],
    unique_name: Callable[[str], str],
) -> None:
    topic = topic_factory("src", partitions=2)
    producer = Producer(with_logger({"bootstrap.servers": bootstrap}))
    for i in range(200):
        producer.produce(topic, key=f"k{i % 7}", value=f"v{i}", partition=i % 2)
    producer.flush(30)
    name = unique_name("kafka")
    df = (spark.readStream.format("walstream").option("name", name)
          .option("source", "kafka").option("topics", topic)
          .option("kafka.bootstrap.servers", bootstrap).option("decode", "utf-8").load())
    assert [f.name for f in df.schema.fields][:2] == ["value", "key"]
    query = df.writeStream.format("memory").queryName(name.replace("-", "_")).start()
    try:
        wait_until(lambda: len(rows_of(spark, query.name)) >= 200, 120, "200 rows",
                   poll_s=0.5)
        time.sleep(1.5)  # a trigger more: nothing is added twice
    finally:
        query.stop()
    rows = rows_of(spark, query.name)
    assert sorted((r.key, r.value) for r in rows) == sorted(
        (f"k{i % 7}", f"v{i}") for i in range(200))
    wait_until(no_engines, 60, "the source's engine to stop", poll_s=0.2)


def test_a_bad_option_fails_with_its_name(spark: Any) -> None:
    with pytest.raises(Exception, match="option 'name' is required"):
        spark.readStream.format("walstream").option("source", "rate").load()


def test_the_socket_source_gives_every_line(
    spark: Any, unique_name: Callable[[str], str]
) -> None:
    import socket
    import threading

    lines = [f"line {i}" for i in range(500)]
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall("".join(f"{x}\n" for x in lines).encode())
            time.sleep(60)  # keep the connection: a closed one is a receiver error

    threading.Thread(target=serve, daemon=True).start()
    name = unique_name("sock")
    df = (spark.readStream.format("walstream").option("name", name)
          .option("source", "socket").option("host", "127.0.0.1")
          .option("port", str(server.getsockname()[1])).option("decode", "utf-8").load())
    query = df.writeStream.format("memory").queryName(name.replace("-", "_")).start()
    try:
        wait_until(lambda: len(rows_of(spark, query.name)) >= len(lines), 120,
                   "every line", poll_s=0.5)
    finally:
        query.stop()
        server.close()
    assert sorted(r.value for r in rows_of(spark, query.name)) == sorted(lines)
    wait_until(no_engines, 60, "the source's engine to stop", poll_s=0.2)


def test_two_queries_on_one_source_each_get_every_item(
    spark: Any, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("two")

    def start(table: str) -> Any:
        df = (spark.readStream.format("walstream").option("name", name)
              .option("receiver", "walstream.testing.sequence_receiver:SequenceReceiver")
              .option("receiver.args", json.dumps({"total": 400, "rate": 800}))
              .option("decode", "utf-8").option("maxBlocksPerTrigger", "3").load())
        return df.writeStream.format("memory").queryName(table).start()

    a, b = start(f"{name}_a".replace("-", "_")), start(f"{name}_b".replace("-", "_"))
    try:
        for q in (a, b):
            wait_until(lambda q=q: len(rows_of(spark, q.name)) >= 400, 120,
                       f"400 rows in {q.name}", poll_s=0.5)
        time.sleep(2)  # triggers more: nothing twice
    finally:
        a.stop()
        b.stop()
    for q in (a, b):
        assert sorted(r.value for r in rows_of(spark, q.name)) == sorted(
            f"item-{i}" for i in range(400)), q.name
    wait_until(no_engines, 60, "the source's engine to stop", poll_s=0.2)
