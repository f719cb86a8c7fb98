"""Ingest benchmark: Kafka source -> receiver blocks in the WAL -> reported to the driver.

Usage (from the repo root)::

    python -m bench.ingest_bench [--size small|full] [--runs N] [--cluster/--no-cluster]
        [--block-interval-ms MS] [--max-block-records N] [--chunk-bytes B]
        [--profile/--no-profile] [--out bench/RESULTS-ingest.md]

Per record size (100 B and 10 KB values, no key), against one broker
(``KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded in-memory Tansu on 127.0.0.1
that is always stopped):

(r) raw: a stand-alone confluent-kafka ``Producer`` (``RAW_PRODUCER_CONFIG``: acks=all,
    idempotent, linger.ms=5, a delivery callback per record, ``flush`` at the end)
    produces the same N records to a fresh 1-partition topic -> records/s, MB/s. Its
    producer is warmed by one untimed record first: a fresh idempotent producer needs
    0.5-1 s for its producer id on this broker, and the baseline is a running producer.
(1) one receiver: the real pipeline. Driver: ``ReceivedBlockTracker`` over
    ``BatchedWriteAheadLog(KafkaWriteAheadLog)`` and the gRPC ``ReceiverTracker``; a
    ``KafkaReceiver`` launched as a Spark job (``start_all_receivers``) on ``local[3]``
    reads a source topic pre-filled with N records; its supervisor writes each block
    to the receiver's Kafka WAL (acks=all) and reports it (AddBlock, answered after the
    driver logged it). Time: from the receiver's registration to the moment the
    driver's acknowledged positions (``ReceivedBlockTracker.positions``) cover all N
    records. Ratio to the raw run of the same iteration. The fresh driver WAL is warmed
    (one empty batch allocation) before the launch, as a running driver's is; the
    receiver's WAL producer is created by the receiver task and is cold, as it is in
    every receiver start, so its start is inside the measured time.
(2) two receivers, each on its own pre-filled source topic of N/2 records, on
    ``local[3]`` and (``--cluster``) on a Spark standalone cluster on loopback (a
    master and two workers of 1 core each, so one executor JVM per receiver; master
    and workers are always killed, process groups, at the end). Time: from the first
    registration to the moment both streams are covered.

Runs of the cases are interleaved (raw, 1, 2 of iteration 1, then of iteration 2, ...)
so that drift of the shared machine hits every case alike. Every run uses a fresh
driver WAL, fresh receiver WALs and a fresh consumer group, and deletes its WAL topics
afterwards; source topics are filled once per size and phase and deleted after it.

``--profile`` adds one diagnostic pass per size (not part of the table): the same
receiver, supervisor and driver, but the receiver runs in a spawned subprocess with
timers around the source poll, item encoding, ``add_data``, the block encode, the WAL
write and the AddBlock call, to show where the time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench.common import (
    RAW_PRODUCER_CONFIG,
    Stat,
    admin_client,
    bench_broker,
    create_topic,
    delete_topics,
    log,
    machine_info,
    md_facts,
    md_table,
    write_results,
)
from walstream.testing.standalone import standalone_cluster

MB = 1_000_000  # throughput unit: 10^6 bytes of record payload (key + value)
RECORD_SIZES = (100, 10_000)  # value bytes; keys are None
RATIO_TARGET = 0.7
CLEAN_ALL_MS = 2**42  # later than any record time: clean() deletes every segment
WAL_TOPIC_PREFIX = "walstream.wal."  # KafkaWalConfig.topic_prefix (default)
POLL_S = 0.005  # how often the bench polls the driver's positions


@dataclass(frozen=True)
class Size:
    records: dict[int, int]  # record size -> N per run
    timeout_s: float  # bound on one receiver run


SIZES = {
    "small": Size({100: 30_000, 10_000: 3_000}, timeout_s=120.0),
    # Sustained rates: a receiver's start (consumer, cold WAL producer, first block:
    # ~1 s, reported apart as "first report") must not dominate the run, so the
    # full size runs ~10-20 s per receiver case (250k / 30k records took 2-5 s).
    "full": Size({100: 1_000_000, 10_000: 60_000}, timeout_s=600.0),
}


@dataclass(frozen=True)
class IngestConfig:
    """The documented knobs this benchmark may tune (everything else: defaults)."""

    block_interval_ms: int = 200  # BlockGeneratorConfig default
    max_block_records: int = 100_000  # BlockGeneratorConfig default
    chunk_bytes: int = 512 * 1024  # KafkaWalConfig default

    def generator(self) -> Any:
        from receiver.block_generator import BlockGeneratorConfig

        return BlockGeneratorConfig(block_interval_ms=self.block_interval_ms,
                                    max_block_records=self.max_block_records)

    def wal_options(self) -> dict[str, Any]:
        return {"chunk_bytes": self.chunk_bytes}


# -- records and the raw baseline --------------------------------------------------------


def value_pool(size: int, distinct: int = 1024) -> list[bytes]:
    """``distinct`` ASCII values of ``size`` bytes (the KafkaReceiver decodes them as UTF-8)."""
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    body = (alphabet * (size // len(alphabet) + 2))
    out = []
    for i in range(distinct):
        head = b"%08d-" % i
        rot = i % len(alphabet)
        out.append((head + body[rot:rot + size])[:size])
    return out


def produce(bootstrap: str, topic: str, size: int, n: int, warm: bool = False) -> float:
    """Produce ``n`` records of ``size`` bytes to partition 0; seconds until all acked.

    ``warm``: first produce one extra record and wait for it, untimed, so that the
    idempotent producer's start (0.5-1 s for its producer id on this broker) is not
    measured: the raw baseline is a running producer's throughput.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **RAW_PRODUCER_CONFIG})
    pool = value_pool(size)
    mask = len(pool) - 1
    failed: list[str] = []
    acked = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[0] += 1

    if warm:
        producer.produce(topic, pool[0], partition=0, on_delivery=on_delivery)
        if producer.flush(60) or acked[0] != 1:
            raise RuntimeError(f"warm-up produce to {topic} failed: {failed[:3]}")
        acked[0] = 0
    t0 = time.perf_counter()
    for i in range(n):
        value = pool[i & mask]
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i & 1023 == 1023:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - t0
    if failed or left or acked[0] != n:
        raise RuntimeError(f"produce to {topic}: {acked[0]}/{n} acked, {left} left, "
                           f"errors {failed[:3]}")
    return elapsed


def raw_run(bootstrap: str, admin: Any, size: int, n: int) -> float:
    topic = f"bench-ingest-raw-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic, 1)
    try:
        return produce(bootstrap, topic, size, n, warm=True)
    finally:
        delete_topics(admin, [topic])


# -- the receiver pipeline ---------------------------------------------------------------


@dataclass
class RunResult:
    seconds: float  # first registration -> every stream covered
    records: int
    blocks: int
    per_stream: dict[int, float] = field(default_factory=dict)  # records/s per receiver
    first_report_s: float = 0.0  # first registration -> first position reported
    steady_rate: float = 0.0  # records/s from half of the records covered to all
    register_skew_s: float = 0.0  # last registration - first registration
    placements: dict[int, str] = field(default_factory=dict)
    launch_s: float = 0.0  # start_all_receivers -> first registration (not measured time)
    raw_rate: float = 0.0  # records/s of the raw run of the same iteration


def raw_consume(bootstrap: str, topic: str, n: int) -> float:
    """Seconds for a bare confluent-kafka consumer (fresh group, batches of 10,000,
    every value touched) to read ``n`` records of ``topic`` from its start, counted
    from the consumer's creation like a receiver's time from its registration: what
    reading the source alone costs on this broker, the ceiling of any pipeline that
    starts with it."""
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 600
        while got < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw consume of {topic}: {got}/{n} records in 600 s")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    msg.value()
                    got += 1
        return time.perf_counter() - t0
    finally:
        consumer.close()


def _topics_with_prefix(admin: Any, prefix: str) -> list[str]:
    return sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix))


def _executor_of(executor_id: str) -> str:
    """``host:daemon_pid:worker_pid`` -> the Spark executor whose JVM started that daemon."""
    try:
        daemon = int(executor_id.split(":")[1])
        stat = Path(f"/proc/{daemon}/stat").read_text()
        jvm = int(stat.rsplit(")", 1)[1].split()[1])
        args = Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return "unknown"
    if b"--executor-id" in args:
        i = args.index(b"--executor-id")
        return f"executor {args[i + 1].decode()} (JVM pid {jvm})"
    return f"driver JVM (pid {jvm})"


def warm_driver_wal(blocks: Any) -> None:
    """Log one (empty) batch allocation, as a running driver's job generator has.

    A fresh idempotent producer needs 0.5-1 s on this broker before its first record
    is acknowledged (producer id); a driver that has been running has paid that long
    before a receiver starts, so the bench's fresh driver pays it here, outside the
    measured window. The receiver's own WAL producer stays cold (measured).
    """
    blocks.allocate_blocks_to_batch(1)


def receiver_run(sc: Any, bootstrap: str, admin: Any, sources: Sequence[tuple[str, int]],
                 cfg: IngestConfig, timeout_s: float) -> RunResult:
    """One run: a receiver per ``(topic, records)`` source; see the module docstring."""
    from driver.received_block_tracker import ReceivedBlockTracker
    from driver.receiver_tracker import ReceiverTracker
    from receiver import KafkaReceiver
    from receiver.task import ReceiverTaskSpec
    from wal import BatchedWriteAheadLog, KafkaWriteAheadLog

    app = f"bench-ingest-{uuid.uuid4().hex[:8]}"
    ids = list(range(len(sources)))
    registered: dict[int, float] = {}

    def listener(event: str, stream_id: int, detail: str) -> None:
        if event == "receiver_started":
            registered.setdefault(stream_id, time.monotonic())

    blocks = ReceivedBlockTracker(
        ids, BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    warm_driver_wal(blocks)
    tracker = ReceiverTracker(blocks, ids, listener=listener)
    specs = [
        ReceiverTaskSpec(i, KafkaReceiver(bootstrap, f"{app}-group-{i}", {topic: 1}),
                         tracker.address, bootstrap, f"{app}-receiver-{i}",
                         cfg.generator(), wal_options=cfg.wal_options())
        for i, (topic, _) in enumerate(sources)
    ]
    try:
        launched = time.monotonic()
        tracker.start_all_receivers(sc, specs, relaunch_delay_s=0.5, max_relaunches=0)
        done: dict[int, float] = {}
        first_report = 0.0
        half = (0.0, 0)  # (when, records) the positions first covered half of all records
        total = sum(n for _, n in sources)
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ids):
            now = time.monotonic()
            covered = [sum(r.until_offset for r in blocks.positions(s)) for s in ids]
            if any(covered) and not first_report:
                first_report = now
            if sum(covered) * 2 >= total and not half[0]:
                half = (now, sum(covered))
            for s, (_, n) in enumerate(sources):
                if s not in done and covered[s] >= n:
                    done[s] = now
            for s in ids:
                info = tracker.receivers[s]
                if info.state == "failed" or info.launches > 1:
                    raise RuntimeError(f"receiver {s} failed: {info.errors[-3:]}")
            if now > deadline:
                raise RuntimeError(
                    f"timed out after {timeout_s:.0f}s: positions "
                    f"{[blocks.positions(s) for s in ids]}, wanted {[n for _, n in sources]}")
            time.sleep(POLL_S)
        t0 = min(registered.values())
        unallocated = [blocks.get_unallocated_blocks(s) for s in ids]
        got = [sum(b.num_records for b in bs) for bs in unallocated]
        if got != [n for _, n in sources]:
            raise RuntimeError(f"the driver holds {got} records, wanted {[n for _, n in sources]}")
        placements = {}
        for s in ids:
            info = tracker.receivers[s]
            placements[s] = (f"{_executor_of(info.executor_id)}; scheduled "
                             f"{','.join(info.scheduled_locations) or '-'}")
        return RunResult(
            seconds=max(done.values()) - t0,
            records=sum(got),
            blocks=sum(len(bs) for bs in unallocated),
            per_stream={s: sources[s][1] / (done[s] - registered[s]) for s in ids},
            first_report_s=first_report - t0,
            steady_rate=((total - half[1]) / (max(done.values()) - half[0])
                         if total > half[1] else 0.0),
            register_skew_s=max(registered.values()) - t0,
            placements=placements,
            launch_s=t0 - launched,
        )
    finally:
        tracker.stop_all_receivers()
        tracker.stop()
        with contextlib.suppress(Exception):
            blocks.cleanup_old_batches(CLEAN_ALL_MS, wait_for_completion=True)
        blocks.stop()
        delete_topics(admin, _topics_with_prefix(admin, f"{WAL_TOPIC_PREFIX}{app}"))
        del tracker, blocks, specs
        gc.collect()  # drop the run's clients now, not when the broker is gone


# -- the profiled pass (a diagnostic) --------------------------------------------------------


def _profiled_receiver(driver: str, bootstrap: str, app: str, topic: str,
                       cfg: IngestConfig, out: Any) -> None:
    """Subprocess: the KafkaReceiver + supervisor of a receiver task, with timers.

    Puts ``(events, sums, blocks)`` on ``out``: wall-clock event times, summed
    receiving-thread timers and one ``(start, end, wal_s, add_block_s, records, bytes)``
    per pushed block.
    """
    import receiver.kafka_receiver as kafka_receiver_module
    from receiver import KafkaReceiver
    from receiver.driver_client import DriverClient
    from receiver.supervisor import ReceiverSupervisor
    from wal import KafkaWriteAheadLog

    ev: dict[str, float] = {}
    sums: dict[str, float] = {"poll": 0.0, "encode": 0.0, "store": 0.0, "records": 0.0}
    blocks: list[tuple[float, float, float, float, int, int, float, float]] = []
    cur: dict[str, float] = {}
    begun: dict[str, tuple[float, float]] = {}
    pc, now = time.perf_counter, time.time

    # The receiver's default UTF-8 path encodes each item in its receiving loop and
    # hands the batch over pre-encoded: time the encoding there (it counts as part
    # of storing; the wrapper adds ~0.2 us per record) and the hand-over below.
    untimed_pair = kafka_receiver_module.encode_utf8_pair

    def timed_pair(key: bytes | None, value: bytes | None) -> bytes:
        t1 = pc()
        data = untimed_pair(key, value)
        spent = pc() - t1
        sums["encode"] += spent
        sums["store"] += spent
        return data

    kafka_receiver_module.encode_utf8_pair = timed_pair

    class TimedConsumer:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def poll(self, timeout: float) -> Any:
            t1 = pc()
            msg = self.inner.poll(timeout)
            if "first_msg" in ev:
                sums["poll"] += pc() - t1
            elif msg is not None and msg.error() is None:
                ev["first_msg"] = now()
            if msg is not None and msg.error() is None:
                ev["last_msg"] = now()
            return msg

        def consume(self, num_messages: int, timeout: float) -> Any:
            t1 = pc()
            msgs = self.inner.consume(num_messages, timeout)
            good = [m for m in msgs if m.error() is None]
            if "first_msg" in ev:
                sums["poll"] += pc() - t1
            elif good:
                ev["first_msg"] = now()
            if good:
                ev["last_msg"] = now()
            return msgs

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    class TimedReceiver(KafkaReceiver):
        def onStart(self) -> None:
            ev["onstart_begin"] = now()
            super().onStart()
            ev["onstart_end"] = now()

        def _receive(self) -> None:  # the receiving thread; onStart created the consumer
            self._consumer = TimedConsumer(self._consumer)  # type: ignore[assignment]
            super()._receive()

        def store(self, data: Any, metadata: Any = None) -> None:
            t1 = pc()
            super().store(data, metadata)
            sums["store"] += pc() - t1
            sums["records"] += 1

        def storeMany(self, items: Any, metadata: Any = None) -> None:
            t1 = pc()
            batch = list(items)
            super().storeMany(batch, metadata)
            sums["store"] += pc() - t1
            sums["records"] += len(batch)

    class TimedClient(DriverClient):
        def add_block(self, info: Any) -> bool:
            t1 = pc()
            ok = super().add_block(info)
            cur["add"] = pc() - t1
            return ok

    class TimedSupervisor(ReceiverSupervisor):
        def _encode(self, item: Any) -> bytes | None:
            t1 = pc()
            data = super()._encode(item)
            sums["encode"] += pc() - t1
            return data

        def push_many_encoded(self, records: list[bytes], metadata: Any = None) -> None:
            t1 = pc()
            super().push_many_encoded(records, metadata)
            sums["store"] += pc() - t1
            sums["records"] += len(records)

        # The pusher is pipelined (begin N+1, then finish N): a block's row runs from
        # its begin to the end of its finish; encode and finish times are its own.
        def begin_push_block(self, block_id: str, records: list[Any]) -> Any:
            start, t1 = now(), pc()
            pending = super().begin_push_block(block_id, records)
            begun[block_id] = (start, pc() - t1)
            return pending

        def finish_push_block(self, pending: Any) -> None:
            if pending is None:
                return
            cur.clear()
            t1 = pc()
            super().finish_push_block(pending)
            start, encode_s = begun.pop(pending.block_id)
            blocks.append((start, now(), cur.get("wal", 0.0), cur.get("add", 0.0),
                           pending.count, len(pending.payload), encode_s, pc() - t1))

        def _store(self, pending: Any) -> Any:
            t1 = pc()
            handle = super()._store(pending)
            cur["wal"] = pc() - t1
            return handle

    receiver = TimedReceiver(bootstrap, f"{app}-group-0", {topic: 1})
    client = TimedClient(driver)
    wal = KafkaWriteAheadLog(bootstrap, f"{app}-receiver-0", **cfg.wal_options())
    sup = TimedSupervisor(receiver, 0, wal, client, cfg.generator(), executor_id="profile")
    try:
        sup.start()
        for cmd in client.control(0):
            if cmd["kind"] == "STOP":
                break
    finally:
        sup.stop("profile done", None)
        wal.close()
        client.close()
    out.put((ev, sums, blocks))


@dataclass
class Profile:
    """One profiled 1-receiver pass; times in seconds, wall clock across processes."""

    records: int
    registered: float
    done: float
    events: dict[str, float]
    sums: dict[str, float]
    blocks: list[tuple[float, float, float, float, int, int, float, float]]
    driver_log_s: list[float]  # the driver's BlockAddition writes (batched WAL)

    def rows(self) -> dict[str, str]:
        ev, su, bl = self.events, self.sums, self.blocks
        reg = self.registered
        total = self.done - reg
        read = max(ev["last_msg"] - ev["first_msg"], 1e-9)
        n = max(su["records"], 1.0)
        steady = bl[1:] or bl
        med = lambda xs: Stat.of(xs).median if xs else 0.0  # noqa: E731
        span = max(self.done - bl[0][0], 1e-9)
        busy = sum(b[6] + b[7] for b in bl) / span
        rest = [b[7] - b[2] - b[3] for b in steady]
        other = max(0.0, read - su["poll"] - su["store"])
        return {
            "records/s (registration -> all reported)": f"{self.records / total:.0f} "
                                                        f"({total:.2f} s)",
            "startup: registration -> consumer assigned": f"{ev['onstart_end'] - reg:.2f} s",
            "startup: -> first record polled": f"{ev['first_msg'] - reg:.2f} s",
            "startup: -> first block reported": f"{bl[0][1] - reg:.2f} s",
            "reading: first -> last record polled": f"{read:.2f} s = "
                                                    f"{n / read:.0f} records/s",
            "reading: us per record, poll / item encode / rest of store / other":
                f"{1e6 * su['poll'] / n:.1f} / {1e6 * su['encode'] / n:.1f} / "
                f"{1e6 * (su['store'] - su['encode']) / n:.1f} / {1e6 * other / n:.1f}",
            "draining: last record polled -> all reported": f"{self.done - ev['last_msg']:.2f} s",
            "blocks: count x median records (KiB)":
                f"{len(bl)} x {med([float(b[4]) for b in bl]):.0f} "
                f"({med([b[5] / 1024 for b in bl]):.0f} KiB)",
            "first block: encode / WAL ack wait / AddBlock ms (cold producer)":
                f"{1000 * bl[0][6]:.0f} / {1000 * bl[0][2]:.0f} / {1000 * bl[0][3]:.0f}",
            "later blocks, median ms: encode + write start / WAL ack wait / AddBlock / "
            "rest (commit)":
                f"{1000 * med([b[6] for b in steady]):.1f} / "
                f"{1000 * med([b[2] for b in steady]):.1f} / "
                f"{1000 * med([b[3] for b in steady]):.1f} / {1000 * med(rest):.1f}",
            "blocks: MB/s through the pusher (first begun -> all reported)":
                f"{sum(b[5] for b in bl) / span / MB:.1f}",
            "driver: BlockAddition log ms (median; first)":
                f"{1000 * med(self.driver_log_s[1:] or self.driver_log_s):.1f}; "
                f"{1000 * self.driver_log_s[0]:.0f}" if self.driver_log_s else "-",
            "pusher busy (first block pushed -> done)": f"{busy:.0%}",
        }


def profile_run(bootstrap: str, admin: Any, topic: str, n: int, cfg: IngestConfig,
                timeout_s: float) -> Profile:
    from driver.received_block_tracker import ReceivedBlockTracker
    from driver.receiver_tracker import ReceiverTracker
    from wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle

    app = f"bench-ingest-prof-{uuid.uuid4().hex[:8]}"
    registered: list[float] = []
    driver_log: list[float] = []

    class TimedBatched(BatchedWriteAheadLog):
        def write(self, record: bytes, time_ms: int) -> RecordHandle:
            t1 = time.perf_counter()
            h = super().write(record, time_ms)
            driver_log.append(time.perf_counter() - t1)
            return h

    def listener(event: str, stream_id: int, detail: str) -> None:
        if event == "receiver_started" and not registered:
            registered.append(time.time())

    blocks = ReceivedBlockTracker([0], TimedBatched(KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    warm_driver_wal(blocks)
    driver_log.clear()  # the warm-up write
    tracker = ReceiverTracker(blocks, [0], listener=listener)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_profiled_receiver,
                       args=(tracker.address, bootstrap, app, topic, cfg, out))
    try:
        proc.start()
        deadline = time.monotonic() + timeout_s
        while sum(r.until_offset for r in blocks.positions(0)) < n:
            if time.monotonic() > deadline or not proc.is_alive():
                raise RuntimeError(f"profile run: positions {blocks.positions(0)} of {n}")
            time.sleep(POLL_S)
        done = time.time()
        tracker.stop_all_receivers()  # sends STOP on the control stream
        ev, sums, pushed = out.get(timeout=60)
    finally:
        if proc.pid is not None:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        tracker.stop()
        with contextlib.suppress(Exception):
            blocks.cleanup_old_batches(CLEAN_ALL_MS, wait_for_completion=True)
        blocks.stop()
        delete_topics(admin, _topics_with_prefix(admin, f"{WAL_TOPIC_PREFIX}{app}"))
    return Profile(n, registered[0], done, ev, sums, pushed, driver_log)


def _wait_executors(sc: Any, n: int, timeout_s: float = 90.0) -> list[Any]:
    from driver.receiver_scheduling import executors_of

    deadline = time.monotonic() + timeout_s
    while True:
        found = [e for e in executors_of(sc) if e.executor_id != "driver"]
        if len(found) >= n:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"only executors {found} after {timeout_s}s")
        time.sleep(0.5)


# -- running it all -------------------------------------------------------------------------


CASE_TITLES = {
    "raw": "raw confluent-kafka produce",
    "consume": "raw confluent-kafka consume of the 1-receiver source (read ceiling)",
    "one": "1 receiver, local[3]",
    "two-local": "2 receivers, local[3]",
    "two-cluster": "2 receivers, standalone (2 workers x 1 core)",
}


@dataclass
class Results:
    seconds: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    runs: dict[tuple[int, str], list[RunResult]] = field(default_factory=dict)
    ratios: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    profiles: dict[int, Profile] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)  # 1-min load average per iteration

    def add(self, size: int, case: str, seconds: float, run: RunResult | None = None) -> None:
        self.seconds.setdefault((size, case), []).append(seconds)
        if run is not None:
            self.runs.setdefault((size, case), []).append(run)


def _fill_sources(bootstrap: str, admin: Any, size: int, parts: list[int]) -> list[str]:
    topics = []
    for n in parts:
        topic = f"bench-ingest-src-{uuid.uuid4().hex[:8]}"
        create_topic(admin, topic, 1)
        topics.append(topic)
        secs = produce(bootstrap, topic, size, n)
        log(f"  filled {topic}: {n} x {size} B in {secs:.1f}s")
    return topics


def _broker_rss(pid: int) -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return f"{int(line.split()[1]) / 1024:.0f} MiB"
    return "unknown"


def _log_run(size: int, case: str, n: int, secs: float, raw_secs: float | None,
             run: RunResult | None = None) -> None:
    rate = n / secs
    ratio = f", {raw_secs / secs:.2f}x raw" if raw_secs else ""
    extra = ""
    if run is not None:
        extra = (f" ({secs:.2f} s; launch {run.launch_s:.2f} s, first report "
                 f"{run.first_report_s:.2f} s, {run.blocks} blocks)")
    log(f"  {size:>6} B {case:<12} {rate:>10.0f} rec/s {rate * size / MB:7.1f} MB/s"
        f"{ratio}{extra}")


def run_local(bootstrap: str, admin: Any, size_cfg: Size, runs: int, cfg: IngestConfig,
              res: Results, profile: bool, broker_pid: int) -> None:
    from driver.spark import create_spark_context

    sc = create_spark_context("walstream-ingest-bench", "local[3]")
    try:
        for size in RECORD_SIZES:
            n = size_cfg.records[size]
            res.records[size] = n
            log(f"{size} B records, N={n}: filling sources")
            one, = _fill_sources(bootstrap, admin, size, [n])
            two = _fill_sources(bootstrap, admin, size, [n // 2, n - n // 2])
            try:
                for i in range(runs):
                    log(f"{size} B run {i + 1}/{runs}")
                    res.loads.append(f"{size} B local #{i + 1}: {_load1()}")
                    raw = raw_run(bootstrap, admin, size, n)
                    res.add(size, "raw", raw)
                    _log_run(size, "raw", n, raw, None)
                    consumed = raw_consume(bootstrap, one, n)
                    res.add(size, "consume", consumed)
                    res.ratios.setdefault((size, "consume"), []).append(raw / consumed)
                    _log_run(size, "consume", n, consumed, raw)
                    r1 = receiver_run(sc, bootstrap, admin, [(one, n)], cfg, size_cfg.timeout_s)
                    r1.raw_rate = n / raw
                    res.add(size, "one", r1.seconds, r1)
                    res.ratios.setdefault((size, "one"), []).append(raw / r1.seconds)
                    _log_run(size, "one", n, r1.seconds, raw, r1)
                    r2 = receiver_run(sc, bootstrap, admin,
                                      [(two[0], n // 2), (two[1], n - n // 2)], cfg,
                                      size_cfg.timeout_s)
                    r2.raw_rate = n / raw
                    res.add(size, "two-local", r2.seconds, r2)
                    res.ratios.setdefault((size, "two-local"), []).append(raw / r2.seconds)
                    _log_run(size, "two-local", n, r2.seconds, raw, r2)
                if profile:
                    log(f"{size} B profiled pass")
                    res.profiles[size] = profile_run(bootstrap, admin, one, n, cfg,
                                                     size_cfg.timeout_s)
            finally:
                log(f"broker RSS with the {size} B sources: {_broker_rss(broker_pid)}")
                delete_topics(admin, [one, *two])
    finally:
        sc.stop()


def run_cluster(bootstrap: str, admin: Any, size_cfg: Size, runs: int, cfg: IngestConfig,
                res: Results, broker_pid: int) -> None:
    from driver.spark import create_spark_context

    with standalone_cluster(2) as url:
        sc = create_spark_context("walstream-ingest-bench-cluster", url,
                                  {"spark.executor.memory": "768m", "spark.cores.max": "2"})
        try:
            execs = _wait_executors(sc, 2)
            log(f"executors {execs}")
            for size in RECORD_SIZES:
                n = size_cfg.records[size]
                log(f"{size} B records, N={n}: filling sources (cluster)")
                two = _fill_sources(bootstrap, admin, size, [n // 2, n - n // 2])
                try:
                    for i in range(runs):
                        log(f"{size} B cluster run {i + 1}/{runs}")
                        res.loads.append(f"{size} B cluster #{i + 1}: {_load1()}")
                        raw = raw_run(bootstrap, admin, size, n)
                        res.add(size, "raw", raw)
                        _log_run(size, "raw", n, raw, None)
                        r2 = receiver_run(sc, bootstrap, admin,
                                          [(two[0], n // 2), (two[1], n - n // 2)], cfg,
                                          size_cfg.timeout_s)
                        r2.raw_rate = n / raw
                        res.add(size, "two-cluster", r2.seconds, r2)
                        res.ratios.setdefault((size, "two-cluster"), []).append(raw / r2.seconds)
                        _log_run(size, "two-cluster", n, r2.seconds, raw, r2)
                        for s, where in r2.placements.items():
                            log(f"    receiver {s}: {where}")
                finally:
                    log(f"broker RSS with the {size} B sources: {_broker_rss(broker_pid)}")
                    delete_topics(admin, two)
        finally:
            sc.stop()


# -- the report -------------------------------------------------------------------------------


def _load1() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except (OSError, IndexError):
        return "?"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def render(res: Results, facts: dict[str, str], args: argparse.Namespace, cfg: IngestConfig,
           load_start: str, load_end: str, argv: list[str]) -> str:
    lines = ["# Ingest throughput: Kafka source -> receiver WAL -> reported", ""]
    lines += [f"Command: `python -m bench.ingest_bench {shlex.join(argv)}`".replace("  ", " "),
              "", md_facts({**facts, "Load at start (uptime)": load_start,
                            "Load at end (uptime)": load_end,
                            "1-min load average at each iteration's start": "; ".join(res.loads)
                            + " (2 cores; includes this benchmark's own broker, JVMs and "
                            "workers from the previous iteration)"}), ""]
    lines += ["## Config", "",
              md_table(["knob", "value"], [
                  ["block_interval_ms (BlockGeneratorConfig)", str(cfg.block_interval_ms)],
                  ["max_block_records (BlockGeneratorConfig)", str(cfg.max_block_records)],
                  ["queue_size (BlockGeneratorConfig)", "10 (default)"],
                  ["chunk_bytes (KafkaWalConfig, receiver WAL)", str(cfg.chunk_bytes)],
                  ["receiver WAL", "KafkaWriteAheadLog, defaults otherwise (acks=all, "
                   "idempotent, linger_ms=0)"],
                  ["driver WAL", "BatchedWriteAheadLog(KafkaWriteAheadLog), defaults; fresh "
                   "per run and warmed by one empty batch allocation before the receivers "
                   "launch (a running driver's producer is warm; a cold one costs 0.5-1 s "
                   "once)"],
                  ["KafkaReceiver", "default consumer settings and UTF-8 decoders; source "
                   "topics of 1 partition"],
                  ["raw producer", ", ".join(f"{k}={v}" for k, v in RAW_PRODUCER_CONFIG.items())
                   + "; a delivery callback per record; flush at the end; fresh producer "
                   "per run, warmed by one untimed record (the receiver's WAL producer is "
                   "cold at registration and that start is measured)"],
                  ["records", ", ".join(f"{s} B values x {res.records.get(s, 0)}"
                                        for s in RECORD_SIZES) + "; key None; ASCII"],
                  ["runs per case", str(args.runs)],
              ]), ""]
    lines += ["## Results", "",
              "Each cell: median [min, max] over the runs. MB = 10^6 bytes of record payload. "
              "Ratio: per iteration, receiver rate / raw rate of the same iteration (the raw "
              "row pools the raw runs of every phase). Receiver time runs from the (first) "
              "registration to the moment the driver's acknowledged positions cover all N "
              "records, so it includes the consumer's start, the receiver WAL's cold "
              "producer (its first write waits for a producer id) and the last block's WAL "
              "write and AddBlock. *Second half*: records reported "
              "from the moment the driver's positions first covered half of the N records, "
              "divided by the time from then to the end: the rate once the receiver's start "
              "(consumer, cold WAL producer, first block interval) and the backlog it "
              "leaves are mostly behind it; ratio to the same iteration's raw run. "
              "*Launch*: Spark job submission to registration (not in the measured time). "
              "*Read ceiling*: a bare confluent-kafka consumer (no WAL, no Spark) reading "
              "the 1-receiver source in the same iteration, timed from its creation: a "
              "receiver must read its source, so no receiver row can pass it.",
              ""]
    rows = []
    verdicts = []
    for size in RECORD_SIZES:
        n = res.records.get(size, 0)
        for case in ("raw", "consume", "one", "two-local", "two-cluster"):
            secs = res.seconds.get((size, case))
            if not secs:
                continue
            rates = [n / s for s in secs]
            mbs = [r * size / MB for r in rates]
            ratio = res.ratios.get((size, case))
            verdict = "-"
            if ratio and case == "consume":
                verdict = "reference"
            elif ratio:
                med = Stat.of(ratio).median
                verdict = "met" if med >= RATIO_TARGET else "missed"
                verdicts.append(f"{size} B, {CASE_TITLES[case]}: {med:.2f}x raw "
                                f"(target {RATIO_TARGET}x) -> **{verdict}**")
            steady, notes = "-", "-"
            if (size, case) in res.runs:
                rs = res.runs[(size, case)]
                med_of = lambda xs: Stat.of(xs).median  # noqa: E731
                ok = [r for r in rs if r.steady_rate > 0]
                if ok:
                    steady = (f"{Stat.of([r.steady_rate for r in ok]).fmt(0)} "
                              f"({med_of([r.steady_rate / r.raw_rate for r in ok]):.2f}x)")
                notes = (f"first report {med_of([r.first_report_s for r in rs]):.2f} s; "
                         f"{med_of([float(r.blocks) for r in rs]):.0f} blocks; launch "
                         f"{med_of([r.launch_s for r in rs]):.1f} s")
                if len(rs[0].per_stream) > 1:
                    notes += (f"; registration skew "
                              f"{med_of([r.register_skew_s for r in rs]):.2f} s")
            rows.append([f"{size} B", CASE_TITLES[case], str(len(secs)),
                         Stat.of(rates).fmt(0), Stat.of(mbs).fmt(1),
                         Stat.of(ratio).fmt(2) if ratio else "1", verdict, steady, notes])
    lines += [md_table(["record", "case", "runs", "records/s", "MB/s", "ratio to raw",
                        f"target >= {RATIO_TARGET}x", "second half: records/s (ratio)",
                        "notes (medians)"], rows), ""]
    lines += ["Targets (median ratio):", ""] + [f"- {v}" for v in verdicts] + [""]
    ceiling = []
    for size in RECORD_SIZES:
        cons, one = res.seconds.get((size, "consume")), res.seconds.get((size, "one"))
        runs, n = res.runs.get((size, "one"), []), res.records.get(size, 0)
        if cons and one and len(cons) == len(one) == len(runs):  # same iterations
            per = Stat.of([c / o for c, o in zip(cons, one, strict=True)])
            # Reading and writing every byte through one broker on one machine: if
            # the two shared its capacity, the pair could go no faster than this.
            # Seconds per record of the bound = read's + raw write's.
            both = Stat.of([(n / o) * (c / n + 1 / r.raw_rate)
                            for c, o, r in zip(cons, one, runs, strict=True)])
            ceiling.append(f"- {size} B: 1 receiver = {per.fmt(2)} of the read ceiling; "
                           f"{both.fmt(2)} of the read-then-write bound")
    if ceiling:
        lines += ["Against what reading the source allows (median [min, max] of "
                  "per-iteration ratios). *Read ceiling*: the bare consumer of the same "
                  "iteration. *Read-then-write bound*: 1 / (1/consume + 1/raw produce) "
                  "of the same iteration, the rate if reading the source and writing "
                  "the WAL shared one broker's and one machine's capacity (a model, "
                  "not a law: the receiver may overlap them on other cores):", "",
                  *ceiling, ""]
    placed = [(size, i, r) for size in RECORD_SIZES
              for i, r in enumerate(res.runs.get((size, "two-cluster"), []))]
    if placed:
        lines += ["## Where the receivers ran (standalone cluster)", "",
                  "Executor = the Spark executor whose JVM started the Python daemon that "
                  "ran the receiver task (from the receiver's registration, "
                  "`host:daemon pid:worker pid`); scheduled = the location the "
                  "ReceiverTracker asked for.", ""]
        lines += md_table(["record", "run", "receiver 0", "receiver 1"], [
            [f"{size} B", str(i + 1), r.placements.get(0, "?"), r.placements.get(1, "?")]
            for size, i, r in placed]).splitlines()
        lines += [""]
    if res.profiles:
        lines += ["## Where the time goes (profiled pass, 1 receiver, not in the table)", "",
                  "The receiver of case (1) in a spawned subprocess instead of a Spark worker "
                  "(same KafkaReceiver, supervisor, receiver WAL, gRPC driver and driver WAL), "
                  "with timers around `consumer.poll`, item encoding, `store`, the WAL write "
                  "and the AddBlock call. The receiving thread consumes and stores records "
                  "in batches; the pushing thread is pipelined one block deep: it encodes "
                  "block N+1 (Avro) and starts its WAL write, then waits for block N's "
                  "acks=all (*WAL ack wait*) and reports N (*AddBlock*, answered after the "
                  "driver's WAL write). *Pusher busy*: its encode and finish time over the "
                  "span from the first block to the end.", ""]
        sizes = sorted(res.profiles)
        keys = list(res.profiles[sizes[0]].rows())
        table = {s: res.profiles[s].rows() for s in sizes}
        lines += [md_table(["", *[f"{s} B" for s in sizes]],
                           [[k, *[table[s][k] for s in sizes]] for k in keys]), ""]
    return "\n".join(lines)


def _exit_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.ingest_bench",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    p.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=True,
                   help="also run 2 receivers on a standalone cluster (default on)")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                   help="add a profiled 1-receiver pass per record size (default on)")
    p.add_argument("--block-interval-ms", type=int, default=IngestConfig.block_interval_ms)
    p.add_argument("--max-block-records", type=int, default=IngestConfig.max_block_records)
    p.add_argument("--chunk-bytes", type=int, default=IngestConfig.chunk_bytes)
    p.add_argument("--records-100", type=int, help="override N for 100 B records")
    p.add_argument("--records-10000", type=int, help="override N for 10 KB records")
    p.add_argument("--out", type=Path, default=Path("bench/RESULTS-ingest.md"))
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    cfg = IngestConfig(args.block_interval_ms, args.max_block_records, args.chunk_bytes)
    cfg.generator()  # validates
    size_cfg = SIZES[args.size]
    records = dict(size_cfg.records)
    if args.records_100:
        records[100] = args.records_100
    if args.records_10000:
        records[10_000] = args.records_10000
    size_cfg = Size(records, size_cfg.timeout_s)
    _exit_on_sigterm()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load_start = _uptime()
    log(f"load at start: {load_start}; config {asdict(cfg)}")
    res = Results()
    with bench_broker() as broker:
        log(f"broker: {broker.description}")
        admin = admin_client(broker.bootstrap)
        run_local(broker.bootstrap, admin, size_cfg, args.runs, cfg, res, args.profile,
                  broker.pid)
        if args.cluster:
            run_cluster(broker.bootstrap, admin, size_cfg, args.runs, cfg, res, broker.pid)
        del admin
        gc.collect()
        facts = machine_info(broker.description)
    load_end = _uptime()
    text = render(res, facts, args, cfg, load_start, load_end, argv)
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
