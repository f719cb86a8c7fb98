"""The WAL benchmark's measured cases (``bench.wal_bench``): raw produce, WAL writes, events.

Each function runs one case against the broker at ``bootstrap`` on fresh topics and
deletes them afterwards, so the in-memory broker does not grow between runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from bench.common import (
    RAW_PRODUCER_CONFIG,
    admin_client,
    create_topic,
    delete_topics,
    percentile,
    topics_with_prefix,
)
from walstream.kafka_logging import with_logger
from walstream.wal import (
    BatchedWriteAheadLog,
    KafkaWalConfig,
    KafkaWriteAheadLog,
    RecordHandle,
    WriteAheadLog,
)

MB = 1_000_000  # throughput unit: 10^6 bytes
KIB, MIB = 1024, 1024 * 1024
RECORD_SIZES = (64 * KIB, 1 * MIB)
WRITER_COUNTS = (1, 4)
EVENT_WRITERS = 32
EVENT_BYTES = 200
CLEAN_ALL_MS = 2**42  # later than any record time: clean() deletes every segment
DEFAULT_WAL_OPTIONS: dict[str, Any] = {"write_timeout_s": 60.0}  # everything else: defaults
WAL_OPTIONS: dict[str, Any] = dict(DEFAULT_WAL_OPTIONS)  # plus --wal-option KEY=VALUE
PIPELINE_DEPTH = 8  # write_async futures each writer keeps outstanding
# The raw baseline: what a user tuning a plain confluent-kafka producer for durable
# throughput would run: librdkafka's defaults (linger.ms=5;
# compression none; batch.size 1000000) plus acks=all and idempotence. It does not
# follow the WAL's settings. message.max.bytes is raised only so a 1 MiB value fits.


def fmt_size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n // KIB} KiB"


def _unique(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:10]}"


def _run_threads(n: int, target: Callable[[int], None]) -> float:
    """Run ``target(i)`` on ``n`` threads released together; seconds until the last ends."""
    barrier = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True, name=f"bench-{i}")
               for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} writer thread(s) failed: {errors[0]!r}") from errors[0]
    return elapsed


def _shares(total: int, n: int) -> list[int]:
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def _drop_wal(bootstrap: str, wal: WriteAheadLog, name: str) -> None:
    """Delete every topic of a WAL: its segments by clean(), then the clean marker."""
    try:
        wal.clean(CLEAN_ALL_MS, True)
    finally:
        wal.close()
    admin = admin_client(bootstrap)
    delete_topics(admin, topics_with_prefix(admin, f"{KafkaWalConfig().topic_prefix}{name}--"))


# -- case 1: throughput -------------------------------------------------------------


def raw_message_max_bytes(record_size: int) -> int:
    return max(1_000_000, record_size + 64 * KIB)


def raw_config_text() -> str:
    """The exact settings given to the raw Producer besides bootstrap and message size."""
    return repr(RAW_PRODUCER_CONFIG)


def raw_producer_config(bootstrap: str, record_size: int) -> dict[str, Any]:
    """The raw baseline's producer settings (:data:`RAW_PRODUCER_CONFIG`), for one size."""
    return {"bootstrap.servers": bootstrap, **RAW_PRODUCER_CONFIG,
            "message.max.bytes": raw_message_max_bytes(record_size)}


def raw_throughput(bootstrap: str, record_size: int, writers: int, total_bytes: int,
                   blocking: bool = False) -> float:
    """MB/s of asynchronous produce of ``total_bytes`` in ``record_size`` values; with
    ``blocking`` each writer waits for the delivery of its record before producing the
    next (the semantics of ``KafkaWriteAheadLog.write``; a poller thread serves the
    callbacks)."""
    from confluent_kafka import Producer

    count = total_bytes // record_size
    payload = bytes(bytearray(range(256)) * (record_size // 256))
    admin = admin_client(bootstrap)  # referenced until every admin future resolved
    topic = _unique("raw")
    create_topic(admin, topic)
    config = raw_producer_config(bootstrap, record_size)
    if blocking:
        config["linger.ms"] = 0  # a writer waiting per record gains nothing from lingering
    producer = Producer(with_logger(config))
    lock = threading.Lock()
    delivered = [0]
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                errors.append(err)
            else:
                delivered[0] += 1

    try:
        producer.produce(topic, b"warm-up", partition=0)  # connection + producer id
        if producer.flush(30) != 0:
            raise RuntimeError("raw warm-up record not delivered")

        shares = _shares(count, writers)

        def write_blocking(i: int) -> None:
            for _ in range(shares[i]):
                done = threading.Event()

                def on_own_delivery(err: Any, msg: Any, done: threading.Event = done) -> None:
                    on_delivery(err, msg)
                    done.set()

                producer.produce(topic, payload, partition=0, on_delivery=on_own_delivery)
                if not done.wait(120):
                    raise RuntimeError("raw blocking produce: no delivery within 120 s")

        def write(i: int) -> None:
            for _ in range(shares[i]):
                while True:
                    try:
                        producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.005)
                producer.poll(0)

        polling = threading.Event()

        def poll_loop() -> None:
            while not polling.is_set():
                producer.poll(0.05)

        poller = threading.Thread(target=poll_loop, daemon=True, name="bench-raw-poller")
        if blocking:
            poller.start()
        t0 = time.perf_counter()
        try:
            _run_threads(writers, write_blocking if blocking else write)
        finally:
            polling.set()
            if blocking:
                poller.join()
        left = producer.flush(120)
        elapsed = time.perf_counter() - t0
        if left or errors or delivered[0] != count:
            raise RuntimeError(
                f"raw produce: {delivered[0]}/{count} delivered, {left} left, errors {errors[:3]}"
            )
    finally:
        producer.flush(30)
        delete_topics(admin, [topic])
    return count * record_size / MB / elapsed


def wal_throughput(bootstrap: str, record_size: int, writers: int, total_bytes: int,
                   depth: int = 0) -> float:
    """MB/s of ``KafkaWriteAheadLog.write`` (each call waits for acks=all), or with
    ``depth`` > 0 of ``write_async`` with up to ``depth`` futures outstanding per writer
    (waiting for the oldest when ``depth`` are outstanding, and for all at the end)."""
    count = total_bytes // record_size
    payload = bytes(bytearray(range(256)) * (record_size // 256))
    name = _unique("wal-async" if depth else "wal")
    wal = KafkaWriteAheadLog(bootstrap, name, **WAL_OPTIONS)
    time_ms = int(time.time() * 1000)  # one time for the run: one segment, no roll
    wait_s = wal.config.write_timeout_s + 5.0
    try:
        wal.write(b"warm-up", time_ms)  # creates the segment topic and the producer
        shares = _shares(count, writers)
        handles: list[list[RecordHandle]] = [[] for _ in range(writers)]

        def write(i: int) -> None:
            done = handles[i]
            for _ in range(shares[i]):
                done.append(wal.write(payload, time_ms))

        def write_pipelined(i: int) -> None:
            done = handles[i]
            pending: deque[Future[RecordHandle]] = deque()
            for _ in range(shares[i]):
                if len(pending) >= depth:
                    done.append(pending.popleft().result(timeout=wait_s))
                pending.append(wal.write_async(payload, time_ms))
            while pending:
                done.append(pending.popleft().result(timeout=wait_s))

        elapsed = _run_threads(writers, write_pipelined if depth else write)
        got = [h for hs in handles for h in hs]
        if len(got) != count or len({(h.topic, h.offset) for h in got}) != count:
            raise RuntimeError(f"WAL: {len(got)}/{count} writes acknowledged, "
                               f"{len({(h.topic, h.offset) for h in got})} distinct offsets")
    finally:
        _drop_wal(bootstrap, wal, name)
    return count * record_size / MB / elapsed


# -- case 2: small events -----------------------------------------------------------


@dataclass
class EventRun:
    events_per_s: float
    p50_ms: float
    p99_ms: float
    events: int
    kafka_records: int  # records stored in Kafka (groups for the batched log)


def event_run(bootstrap: str, batched: bool, seconds: float) -> EventRun:
    """``EVENT_WRITERS`` threads each writing ``EVENT_BYTES`` events for ``seconds``."""
    name = _unique("events-batched" if batched else "events-plain")
    inner = KafkaWriteAheadLog(bootstrap, name, **WAL_OPTIONS)
    wal: WriteAheadLog = BatchedWriteAheadLog(inner) if batched else inner
    event = bytes(range(EVENT_BYTES))
    time_ms = int(time.time() * 1000)
    latencies: list[list[float]] = [[] for _ in range(EVENT_WRITERS)]
    try:
        wal.write(event, time_ms)  # segment topic, producer, writer thread
        groups_before = wal.groups_written if isinstance(wal, BatchedWriteAheadLog) else 0
        stop_at = [0.0]

        def write(i: int) -> None:
            lat = latencies[i]
            clock = time.perf_counter
            while clock() < stop_at[0]:
                t = clock()
                wal.write(event, time_ms)
                lat.append(clock() - t)

        stop_at[0] = time.perf_counter() + seconds + 0.05  # threads start within ~50 ms
        elapsed = _run_threads(EVENT_WRITERS, write)
        all_lat = [x for lat in latencies for x in lat]
        records = (wal.groups_written - groups_before if isinstance(wal, BatchedWriteAheadLog)
                   else len(all_lat))
    finally:
        _drop_wal(bootstrap, wal, name)
    return EventRun(len(all_lat) / elapsed, percentile(all_lat, 50) * 1000,
                    percentile(all_lat, 99) * 1000, len(all_lat), records)
