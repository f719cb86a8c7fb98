"""Receivers as long-running Spark tasks, reporting over gRPC; a killed worker is relaunched.

Real broker, real PySpark local[3]: a Kafka receiver runs in a Python worker,
stores blocks in its Kafka WAL and reports them to the driver's ReceiverTracker.
Its worker is killed with SIGKILL mid-stream; the tracker relaunches it, it
resumes from the positions the driver acknowledged, and the union of all
batches equals the source topic exactly: no loss, no duplicate.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from integration_tests.harness import POLL_S, ReceiverPipeline
from walstream.driver.errors import NotLeaderError
from walstream.driver.ha.errors import LeaseLostError
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.spark import create_spark_context
from walstream.receiver import (
    KafkaReceiver,
    RateGeneratorReceiver,
    Receiver,
    SocketTextReceiver,
    generated_line,
)
from walstream.receiver.task import ReceiverTaskSpec, run_receiver_task
from walstream.testing import wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sc() -> Iterator[object]:
    context = create_spark_context("walstream-receiver-tests", "local[3]")
    yield context
    context.stop()


def test_killed_receiver_worker_is_relaunched_and_ingestion_is_exactly_once(
    sc: object, bootstrap: str, topic_factory: Callable[..., str],
    unique_name: Callable[[str], str],
) -> None:
    topic = topic_factory("source", partitions=2)
    total = 6000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def produce() -> None:
        for i in range(total):
            producer.produce(topic, f"rec-{i}".encode(), partition=i % 2)
            if i % 200 == 199:
                producer.flush(10)
                time.sleep(0.05)
        producer.flush(30)

    app = unique_name("app")
    p = ReceiverPipeline(sc, bootstrap, app, [KafkaReceiver(bootstrap, f"{app}-g", {topic: 1})])
    try:
        p.start()
        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        wait_until(lambda: len(p.blocks.get_unallocated_blocks(0)) >= 3, 60, "first blocks",
                   poll_s=POLL_S)
        p.run_batch()
        victim = p.worker_pid(0)
        os.kill(victim, signal.SIGKILL)  # mid-stream, while the feeder is still writing
        killed_at = time.monotonic()
        wait_until(lambda: p.worker_pid(0) not in (-1, victim), 30, "the relaunch",
                   poll_s=POLL_S)
        relaunch_s = time.monotonic() - killed_at
        assert relaunch_s < 10, f"relaunch took {relaunch_s:.1f}s"
        assert p.tracker.receivers[0].launches == 2
        feeder.join(120)
        reported = lambda: sum(r.until_offset for r in p.blocks.positions(0))  # noqa: E731
        wait_until(lambda: reported() >= total, 120, "every record to be reported",
                   poll_s=POLL_S)
        p.run_batch()
        p.stop()
    finally:
        p.close()
    seen = [v for _, v in p.items[0]]
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} duplicates"
    assert sorted(seen) == sorted(f"rec-{i}" for i in range(total))


class Forms(Receiver):
    """Stores 4 x 250 items, one store form each (single, list, iterator, storeBytes)."""

    def onStart(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        for i in range(250):
            self.store(f"single-{i}")
        self.store([f"list-{i}" for i in range(250)])
        self.store(iter([f"iter-{i}" for i in range(250)]))
        for i in range(250):
            self.storeBytes(f"bytes-{i}".encode())

    def onStop(self) -> None:
        pass


def test_a_custom_receiver_delivers_exactly_what_it_stored_in_every_form(
    sc: object, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    p = ReceiverPipeline(sc, bootstrap, unique_name("forms"), [Forms()])
    try:
        p.start()
        wait_until(lambda: sum(b.num_records for b in p.blocks.get_unallocated_blocks(0)) >= 1000,
                   60, "1000 records", poll_s=POLL_S)
        p.stop()
    finally:
        p.close()
    expected = [f"{kind}-{i}" for kind in ("single", "list", "iter") for i in range(250)]
    expected += [f"bytes-{i}".encode() for i in range(250)]
    assert sorted(map(repr, p.items[0])) == sorted(map(repr, expected))


def test_socket_and_generator_receivers(
    sc: object, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    lines = [f"line {i} of the socket" for i in range(500)]
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    connections: list[socket.socket] = []

    def serve() -> None:
        # First connection: half the lines, then hang up; the receiver reconnects.
        for chunk in (lines[:250], lines[250:]):
            conn, _ = server.accept()
            connections.append(conn)
            conn.sendall("".join(f"{line}\n" for line in chunk).encode())
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    gen = RateGeneratorReceiver(rate=2000, seed=7, total=800)
    sock = SocketTextReceiver("127.0.0.1", port, initial_backoff_s=0.05)
    p = ReceiverPipeline(sc, bootstrap, unique_name("sock"), [sock, gen])
    try:
        p.start()
        wait_until(lambda: len(connections) == 2, 30, "the socket receiver to reconnect",
                   poll_s=POLL_S)
        wait_until(lambda: sum(r.until_offset for r in p.blocks.positions(1)) >= 800, 60,
                   "the generator's 800 lines", poll_s=POLL_S)
        wait_until(lambda: sum(b.num_records for b in p.blocks.get_unallocated_blocks(0)) >= 500,
                   60, "the socket's 500 lines", poll_s=POLL_S)
        p.stop()
    finally:
        p.close()
        server.close()
    assert sorted(p.items[0]) == sorted(lines)
    assert p.items[1] == [generated_line(7, i) for i in range(800)]


class _Refused(Receiver):
    def onStart(self) -> None:
        raise AssertionError("a refused receiver must not start")

    def onStop(self) -> None:
        pass


def test_a_receiver_refused_by_the_driver_stops_with_a_clear_message(
    sc: object, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("refused")
    block_tracker = ReceivedBlockTracker([0], None)
    tracker = ReceiverTracker(block_tracker, [0])  # stream 7 is not an input stream
    spec = ReceiverTaskSpec(7, _Refused(), tracker.address, bootstrap, f"{app}-receiver-7")
    try:
        with pytest.raises(Exception, match="is not an input stream of this application"):
            sc.parallelize([0], 1).mapPartitions(  # type: ignore[attr-defined]
                lambda it: run_receiver_task(spec, it)).collect()
    finally:
        tracker.stop()


def test_a_receiver_on_spark_deletes_its_wal_data_only_while_its_driver_leads(
    sc: object, bootstrap: str, unique_name: Callable[[str], str],
) -> None:
    """The delete runs in the receiver's Python worker, on its WAL's cleaning thread:
    a clean the driver commanded and then stopped leading for deletes nothing there
    (the driver's lease check, asked again right before the delete); commanded again
    while it leads, it goes through."""
    from walstream.wal import KafkaWriteAheadLog

    app = unique_name("grant")
    pipe = ReceiverPipeline(sc, bootstrap, app, [RateGeneratorReceiver(200.0, seed=1)])
    rolling = {"rolling_interval_ms": 300}
    pipe.specs = [dataclasses.replace(s, wal_options=rolling) for s in pipe.specs]
    leads = threading.Event()
    leads.set()

    def check() -> None:
        if not leads.is_set():
            raise LeaseLostError("no renewal confirmed in time")

    pipe.tracker.leadership = check
    pipe.tracker.leadership_validity = lambda: 3.0 if leads.is_set() else 0.0
    asks: list[tuple[int, bool]] = []
    grant = pipe.tracker.may_clean

    def recorded(stream_id: int, thresh: int, session: str | None = None) -> float | None:
        try:
            valid = grant(stream_id, thresh, session=session)
        except NotLeaderError:
            asks.append((thresh, False))
            raise
        asks.append((thresh, True))
        return valid

    pipe.tracker.may_clean = recorded  # type: ignore[method-assign]
    reader = KafkaWriteAheadLog(bootstrap, f"{app}-receiver-0", **rolling)
    try:
        pipe.start()
        wait_until(lambda: len(reader.segments()) >= 4, 60, "four segments in the receiver's WAL",
                   poll_s=POLL_S)
        thresh = reader.segments()[1].end_ms  # the two oldest segments are below it

        def below() -> list[str]:
            return [s.topic for s in reader.segments() if s.end_ms <= thresh]

        assert len(below()) == 2
        leads.clear()  # the lease runs out after the driver's own check passed
        pipe.tracker.receivers[0].commands.cleanup(thresh)
        wait_until(lambda: (thresh, False) in asks or len(below()) < 2, 60,
                   "the receiver to ask for its delete (or to delete)", poll_s=POLL_S)
        time.sleep(1.0)  # a delete going ahead regardless would land by now
        assert len(below()) == 2, "a receiver deleted WAL data its driver did not grant"
        leads.set()
        pipe.tracker.cleanup_old_blocks(thresh)
        wait_until(lambda: not below(), 60, "the granted delete", poll_s=POLL_S)
        assert (thresh, True) in asks
    finally:
        reader.close()
        pipe.close()
