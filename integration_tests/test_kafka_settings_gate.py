"""The application's Kafka settings reach every client, end to end, on a real broker.

The broker stands behind a gate that admits only connections whose requests carry
``client.id=walstream-gate-proof`` and advertises the gate's address, so every
connection goes through it (see :mod:`walstream.testing.kafka_gate`). The app sets
``spark.walstream.kafka.client.id`` and nothing else: a client the setting does
not reach is refused and recorded, and the app then loses its output or hangs.
The app runs a receiver stream and a direct stream into a ``KafkaSink``, with
checkpoints; the test reads the output with ``read_exactly_once`` and inspects
the checkpoint with ``walstream inspect --kafka-conf``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from walstream import broker, procs
from walstream.driver import KafkaSink, KafkaUtils, StreamingContext, read_exactly_once
from walstream.driver.app_conf import CONF_BOOTSTRAP
from walstream.driver.spark import create_spark_context
from walstream.kafka_logging import with_logger
from walstream.testing import wait_until
from walstream.testing.kafka_gate import KafkaGate

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PROOF = "walstream-gate-proof"
RECORDS = 200


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[KafkaGate]:
    port = procs.free_port()
    home = tmp_path / "broker-home"
    with KafkaGate(f"127.0.0.1:{port}", PROOF) as g:
        broker.start(home, port=port, attached=True, advertised=g.address)
        # broker.start's readiness check is a client of its own (librdkafka's
        # default client.id) that may also dial the advertised gate; it is
        # destroyed when start returns, so what the gate saw until now is not
        # the app's.
        g.forget()
        try:
            yield g
        finally:
            broker.stop(home)


def _admin(address: str, client_id: str | None) -> AdminClient:
    conf = {"bootstrap.servers": address, "socket.connection.setup.timeout.ms": 3000}
    if client_id is not None:
        conf["client.id"] = client_id
    return AdminClient(with_logger(conf))


def test_the_gate_refuses_a_client_without_the_setting(gate: KafkaGate) -> None:
    """Without this, the test below would prove nothing."""
    with pytest.raises(KafkaException):
        _admin(gate.address, None).list_topics(timeout=3)
    assert "rdkafka" in gate.refused  # librdkafka's default client.id
    assert _admin(gate.address, PROOF).list_topics(timeout=10).brokers
    assert PROOF in gate.admitted


def test_every_client_of_a_checkpointed_app_takes_the_settings(gate: KafkaGate,
                                                               tmp_path: Path) -> None:
    admin = _admin(gate.address, PROOF)
    for name in ("in-receiver", "in-direct", "out"):
        admin.create_topics([NewTopic(name, 1, -1)])[name].result(timeout=30)
    producer = Producer(with_logger({"bootstrap.servers": gate.address, "client.id": PROOF}))
    for i in range(RECORDS):
        producer.produce("in-receiver", f"r{i}".encode())
        producer.produce("in-direct", f"d{i}".encode())
    assert producer.flush(30) == 0

    sc = create_spark_context("kafka-settings-gate", "local[3]", {
        CONF_BOOTSTRAP: gate.address, "spark.walstream.kafka.client.id": PROOF})
    try:
        ssc = StreamingContext(sc, 0.5)
        ssc.checkpoint(str(tmp_path / "ckpt"))
        received = KafkaUtils.createStream(ssc, gate.address, "gate-group", {"in-receiver": 1},
                                           {"auto.offset.reset": "earliest"})
        direct = KafkaUtils.createDirectStream(ssc, ["in-direct"], {
            "bootstrap.servers": gate.address, "auto.offset.reset": "smallest"})
        received.union(direct).map(lambda kv: kv[1]).foreachRDD(KafkaSink(gate.address, "out"))
        ssc.start()
        try:
            wait_until(lambda: len(list(read_exactly_once(gate.address, "out"))) >= 2 * RECORDS,
                       120, f"{2 * RECORDS} records in the output", poll_s=1.0, ssc=ssc,
                       details=lambda: f"refused by the gate: {gate.refused}")
        finally:
            ssc.stop(stopSparkContext=False, stopGraceFully=False)
        got = sorted(v.decode() for _, _, v in read_exactly_once(gate.address, "out")
                     if v is not None)
    finally:
        sc.stop()
    assert got == sorted([f"r{i}" for i in range(RECORDS)] + [f"d{i}" for i in range(RECORDS)])

    shown = subprocess.run(
        [sys.executable, "-m", "walstream.cli", "inspect", str(tmp_path / "ckpt"),
         "--kafka-conf", f"client.id={PROOF}"],
        capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["wal_options"]["client_config"] == {"client.id": PROOF}
    assert report["corrupt_events"] == 0

    assert gate.refused == [], f"clients without the application's settings: {gate.refused}"
    assert len(gate.admitted) >= 10  # driver WAL, receiver WAL, tasks, probe, sink, readers
