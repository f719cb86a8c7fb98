"""Receivers as long-running Spark tasks, reporting over gRPC; a killed worker is relaunched.

Real broker, real PySpark local[3]: a Kafka receiver runs in a Python worker,
stores blocks in its Kafka WAL and reports them to the driver's ReceiverTracker.
Its worker is killed with SIGKILL mid-stream; the tracker relaunches it, it
resumes from the positions the driver acknowledged, and the union of all
batches equals the source topic exactly: no loss, no duplicate.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from driver.block_rdd import block_rdd
from driver.received_block_tracker import ReceivedBlockTracker
from driver.receiver_tracker import ReceiverTracker
from driver.spark import create_spark_context
from receiver import BlockGeneratorConfig, KafkaReceiver, Receiver
from receiver.task import ReceiverTaskSpec, run_receiver_task
from wal import BatchedWriteAheadLog, KafkaWriteAheadLog

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sc() -> Iterator[object]:
    context = create_spark_context("walstream-receiver-tests", "local[3]")
    yield context
    context.stop()


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _worker_pid(tracker: ReceiverTracker, stream_id: int) -> int:
    info = tracker.receivers[stream_id]
    return int(info.executor_id.rsplit(":", 1)[1]) if info.state == "active" else -1


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
    block_tracker = ReceivedBlockTracker(
        [0], BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    tracker = ReceiverTracker(block_tracker, [0])
    spec = ReceiverTaskSpec(
        stream_id=0,
        receiver=KafkaReceiver(bootstrap, f"{app}-group", {topic: 1}),
        driver_address=tracker.address,
        bootstrap_servers=bootstrap,
        wal_name=f"{app}-receiver-0",
        generator_config=BlockGeneratorConfig(block_interval_ms=100),
    )
    seen: list[str] = []
    batch_time = [10_000]

    def run_batch() -> None:
        batch_time[0] += 1000
        block_tracker.allocate_blocks_to_batch(batch_time[0])
        blocks = block_tracker.get_blocks_of_batch_and_stream(batch_time[0], 0)
        seen.extend(v for _, v in block_rdd(sc, blocks, bootstrap).collect())

    try:
        tracker.start_all_receivers(sc, [spec], relaunch_delay_s=0.5)
        _wait(lambda: _worker_pid(tracker, 0) > 0, 60, "the receiver to register")
        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        _wait(lambda: len(block_tracker.get_unallocated_blocks(0)) >= 3, 60, "first blocks")
        run_batch()
        victim = _worker_pid(tracker, 0)
        os.kill(victim, signal.SIGKILL)  # mid-stream, while the feeder is still writing
        killed_at = time.monotonic()
        _wait(lambda: _worker_pid(tracker, 0) not in (-1, victim), 30, "the relaunch")
        relaunch_s = time.monotonic() - killed_at
        assert relaunch_s < 10, f"relaunch took {relaunch_s:.1f}s"
        assert tracker.receivers[0].launches == 2
        feeder.join(120)
        positions = lambda: sum(r.until_offset for r in block_tracker.positions(0))  # noqa: E731
        _wait(lambda: positions() >= total, 120, "every record to be reported")
        run_batch()
        tracker.stop_all_receivers()
        run_batch()
    finally:
        tracker.stop_all_receivers()
        tracker.stop()
        block_tracker.cleanup_old_batches(2**42, wait_for_completion=True)
        block_tracker.stop()
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} duplicates"
    assert sorted(seen) == sorted(f"rec-{i}" for i in range(total))


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
