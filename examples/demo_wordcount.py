"""The walking skeleton, end to end, on a real broker and real PySpark.

generator -> Kafka source topic -> KafkaReceiver -> BlockGenerator -> receiver
WAL (Kafka, acks=all) -> AddBlock -> ReceivedBlockTracker (driver WAL) ->
every batch: allocate -> PySpark job reads the blocks by handle -> word counts.

Run: ``make demo`` (or ``python examples/demo_wordcount.py --seconds 30``). Uses
``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker in a
private home and stops it at the end. Exits 0 when the per-batch counts add up to
exactly the words the generator wrote (nothing lost, nothing doubled).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from operator import add
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from walstream.driver.dstream.block_rdd import block_rdd
from walstream.driver.scheduler.job_generator import JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import ListenerBus
from walstream.driver.ui.metrics import EngineMetrics
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.spark import create_spark_context
from walstream.driver.ui.status_server import serve_status
from walstream.receiver import BlockGeneratorConfig, KafkaReceiver, ReceiverSupervisor
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog
from walstream import broker, procs
from walstream.kafka_logging import with_logger

WORDS = ("kafka", "spark", "stream", "block", "batch", "driver", "receiver", "wal",
         "replay", "offset", "commit", "checkpoint")


@contextlib.contextmanager
def kafka_cluster() -> Iterator[str]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield external
        return
    home = Path(tempfile.mkdtemp(prefix="walstream-demo-"))
    try:
        state = broker.start(home, port=procs.free_port())
        print(f"demo: embedded broker (Tansu) at {state.bootstrap}", flush=True)
        yield state.bootstrap
    except BaseException:
        broker.stop(home)
        print(f"demo: embedded broker stopped; its log is kept in {home}", flush=True)
        raise
    broker.stop(home)
    shutil.rmtree(home, ignore_errors=True)  # nothing in it is worth keeping after a clean run
    print("demo: embedded broker stopped", flush=True)


def generate(bootstrap: str, topic: str, seconds: float, rate: int, seed: int,
             written: Counter[str], lines_out: list[int], done: threading.Event) -> None:
    """Write seeded random lines of words for ``seconds``; count every word written."""
    rng = random.Random(seed)
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5}))
    end = time.monotonic() + seconds
    lines = 0
    try:
        while time.monotonic() < end:
            for _ in range(max(1, rate // 20)):
                words = [rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
                producer.produce(topic, " ".join(words).encode(), partition=0)
                written.update(words)
                lines += 1
            producer.poll(0)
            time.sleep(0.05)
        if producer.flush(30) != 0:
            raise RuntimeError("the generator could not deliver every line")
        lines_out[0] = lines
    finally:
        done.set()
    print(f"demo: generator wrote {lines} lines, {sum(written.values())} words", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the generator writes")
    ap.add_argument("--rate", type=int, default=400, help="lines per second")
    ap.add_argument("--batch-ms", type=int, default=2000, help="batch interval")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    run = uuid.uuid4().hex[:8]
    written: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    t0 = time.monotonic()
    with kafka_cluster() as bootstrap:
        topic = f"demo-words-{run}"
        admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
        admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(timeout=30)

        sc = create_spark_context("walstream-demo")
        driver_wal = KafkaWriteAheadLog(bootstrap, f"demo-{run}-driver")
        receiver_wal = KafkaWriteAheadLog(bootstrap, f"demo-{run}-receiver-0")
        tracker = ReceivedBlockTracker([0], BatchedWriteAheadLog(driver_wal))
        endpoint = LocalReceiverEndpoint(tracker, [0])
        receiver = KafkaReceiver(bootstrap, f"demo-{run}", {topic: 1})
        supervisor = ReceiverSupervisor(
            receiver, 0, receiver_wal, endpoint, BlockGeneratorConfig(block_interval_ms=200)
        )

        def run_batch(t: int) -> None:
            blocks = tracker.get_blocks_of_batch_and_stream(t, 0)
            rdd = block_rdd(sc, blocks, bootstrap)
            counts = dict(rdd.flatMap(lambda kv: kv[1].split())
                          .map(lambda w: (w, 1)).reduceByKey(add).collect())
            counted.update(counts)
            stamp = datetime.fromtimestamp(t / 1000).strftime("%H:%M:%S")
            top = ", ".join(f"{w}={n}" for w, n in sorted(counts.items()))
            print(f"batch {stamp}: {len(blocks)} blocks, {sum(counts.values())} words"
                  f"{': ' + top if top else ''}", flush=True)

        # The status page (what a StreamingContext serves by itself): batches as they run.
        metrics = EngineMetrics(f"demo-{run}")
        bus = ListenerBus()
        bus.add(metrics)
        bus.start()
        status = serve_status(metrics, "127.0.0.1", 0)
        if status is not None:
            print(f"demo: status page at {status.url} (metrics: {status.url}metrics)",
                  flush=True)
        scheduler = JobScheduler(bus, on_batch_completed=lambda info: jobs.on_batch_completed(info))
        jobs = JobGenerator(
            tracker, args.batch_ms,
            lambda t: [Job(t, 0, "word count", lambda: run_batch(t))], scheduler,
            # After a batch: forget batches and WAL records older than one interval.
            cleanup=lambda t: tracker.cleanup_old_batches(t - args.batch_ms, False))
        gen_done = threading.Event()
        lines = [-1]
        generator = threading.Thread(
            target=generate,
            args=(bootstrap, topic, args.seconds, args.rate, args.seed, written, lines, gen_done),
            daemon=True,
        )
        try:
            supervisor.start()
            jobs.start()
            generator.start()
            gen_done.wait()
            generator.join()
            if lines[0] < 0:
                raise RuntimeError("the generator failed")
            # Graceful stop: let the receiver take in every line written, stop it
            # (which stores and reports its last block), then run batches until
            # every reported block was processed.
            deadline = time.monotonic() + 60
            while supervisor.generator.records_added < lines[0]:
                if time.monotonic() > deadline or supervisor.stopped.is_set():
                    raise RuntimeError(f"the receiver stopped taking data: {supervisor.error}")
                time.sleep(0.05)
            supervisor.stop("demo finished", None)
            jobs.stop(drain=lambda: not tracker.has_unallocated_blocks())
            scheduler.wait_idle(120)
            scheduler.stop()
            if scheduler.errors:
                raise scheduler.errors[0]
        finally:
            supervisor.stop("demo ending", None)
            tracker.cleanup_old_batches(2**42, wait_for_completion=True)
            receiver_wal.clean(2**42, wait_for_completion=True)
            tracker.stop()
            receiver_wal.close()
            if status is not None:
                status.stop()
            bus.stop()
            sc.stop()

    total_in, total_out = sum(written.values()), sum(counted.values())
    lost = sum((written - counted).values())
    doubled = sum((counted - written).values())
    print(f"demo: {len(scheduler.completed)} batches in {time.monotonic() - t0:.1f}s; "
          f"words written {total_in}, counted {total_out}; lost {lost}, doubled {doubled}",
          flush=True)
    if lost or doubled or total_in == 0:
        print("demo: FAILED: the counts do not add up to the input", file=sys.stderr)
        return 1
    print("demo: OK: per-batch counts add up exactly to the words written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
