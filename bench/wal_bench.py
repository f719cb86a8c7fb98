"""WAL benchmark: KafkaWriteAheadLog vs raw confluent-kafka produce, and batched small events.

Usage (from the repo root)::

    python -m bench.wal_bench [--size small|full] [--runs N] [--out bench/RESULTS-wal.md]

Cases, all against one broker in one process (``KAFKA_BOOTSTRAP_SERVERS`` when set,
else an embedded in-memory Tansu on 127.0.0.1 that is always stopped):

1. Throughput of block-sized records (64 KiB and 1 MiB) from 1 and 4 writer threads:
   raw asynchronous ``Producer.produce`` of the same payload bytes to a 1-partition
   topic with a well-tuned stand-alone producer (:data:`RAW_PRODUCER_CONFIG`: ``acks=all``,
   idempotent, librdkafka's default ``linger.ms=5``, delivery callbacks, ``flush`` at
   the end; independent of the WAL's settings), next to ``KafkaWriteAheadLog.write``
   (blocks until ``acks=all``) and ``KafkaWriteAheadLog.write_async`` pipelined (each
   writer keeps up to :data:`PIPELINE_DEPTH` writes outstanding), each with its ratio
   to raw. Target: ``write()`` >= 0.7x raw with 4 writers at both sizes (the pipelined
   variant is reported alongside, without a target).
2. 32 writer threads of 200-byte events through ``BatchedWriteAheadLog`` over a
   ``KafkaWriteAheadLog``, and through a plain ``KafkaWriteAheadLog`` for comparison:
   events/s and p50/p99 write latency. Target (batched): >= 5000 events/s, p99 < 50 ms.

Every run uses fresh topics and deletes them afterwards (``clean(2**42, True)`` plus the
clean marker for WAL logs, ``delete_topics`` for raw), so the in-memory broker does not
grow. Runs of the different cases are interleaved (run 1 of every case, then run 2, ...)
so that drift of the shared 2-core machine hits every case alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    RAW_PRODUCER_CONFIG,
    BenchBroker,
    CpuNoise,
    OtherCpu,
    Stat,
    admin_client,
    bench_broker,
    create_topic,
    delete_topics,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    percentile,
    rss_mib,
    topics_with_prefix,
    write_results,
)
from wal import (
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
RATIO_TARGET = 0.7
EVENTS_TARGET = 5000.0
P99_TARGET_MS = 50.0
DEFAULT_WAL_OPTIONS: dict[str, Any] = {"write_timeout_s": 60.0}  # everything else: defaults
WAL_OPTIONS: dict[str, Any] = dict(DEFAULT_WAL_OPTIONS)  # plus --wal-option KEY=VALUE
PIPELINE_DEPTH = 8  # write_async futures each writer keeps outstanding
# The raw baseline: what a user tuning a plain confluent-kafka producer for durable
# throughput would run: librdkafka's defaults (linger.ms=5, the value BROKER.md measured
# with; compression none; batch.size 1000000) plus acks=all and idempotence. It does not
# follow the WAL's settings. message.max.bytes is raised only so a 1 MiB value fits.


@dataclass(frozen=True)
class Size:
    bytes_per_run: int  # payload bytes written per throughput run, per case
    event_seconds: float  # measured duration of one event run


SIZES = {
    "small": Size(bytes_per_run=16 * MIB, event_seconds=1.0),
    "full": Size(bytes_per_run=160 * MIB, event_seconds=5.0),
}


def _fmt_size(n: int) -> str:
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


def _raw_config_text() -> str:
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
    producer = Producer(config)
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


# -- the benchmark ------------------------------------------------------------------


@dataclass
class Results:
    raw: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    raw_blocking: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    wal: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    wal_async: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    events: dict[bool, list[EventRun]] = field(default_factory=dict)
    seconds: float = 0.0
    broker_rss_mib: list[float] = field(default_factory=list)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_max: float = 0.0  # highest 1-min load average seen after any case
    other_cpu: list[CpuNoise] = field(default_factory=list)  # per run


def run_all(broker: BenchBroker, size: Size, runs: int) -> Results:
    res = Results()
    res.load_before = os.getloadavg()
    start = time.perf_counter()
    res.load_max = res.load_before[0]

    def sample_load() -> None:
        res.load_max = max(res.load_max, os.getloadavg()[0])

    for run in range(1, runs + 1):
        other = OtherCpu([os.getpid(), broker.pid])
        other.start()
        for record_size in RECORD_SIZES:
            for writers in WRITER_COUNTS:
                key = (record_size, writers)
                raw = raw_throughput(broker.bootstrap, record_size, writers, size.bytes_per_run)
                raw_blk = raw_throughput(broker.bootstrap, record_size, writers,
                                         size.bytes_per_run, blocking=True)
                wal = wal_throughput(broker.bootstrap, record_size, writers, size.bytes_per_run)
                wal_async = wal_throughput(broker.bootstrap, record_size, writers,
                                           size.bytes_per_run, depth=PIPELINE_DEPTH)
                res.raw.setdefault(key, []).append(raw)
                res.raw_blocking.setdefault(key, []).append(raw_blk)
                res.wal.setdefault(key, []).append(wal)
                res.wal_async.setdefault(key, []).append(wal_async)
                log(f"run {run}/{runs} {_fmt_size(record_size):>7} x{writers}: "
                    f"raw {raw:7.1f} MB/s  raw blocking {raw_blk:7.1f} MB/s  "
                    f"write() {wal:7.1f} MB/s ({wal / raw:.2f}x)  "
                    f"write_async {wal_async:7.1f} MB/s ({wal_async / raw:.2f}x)")
                sample_load()
        for batched in (True, False):
            ev = event_run(broker.bootstrap, batched, size.event_seconds)
            res.events.setdefault(batched, []).append(ev)
            log(f"run {run}/{runs} events {'batched' if batched else 'plain  '}: "
                f"{ev.events_per_s:8.0f} ev/s  p50 {ev.p50_ms:6.2f} ms  p99 {ev.p99_ms:6.2f} ms  "
                f"({ev.events} events in {ev.kafka_records} Kafka records)")
            sample_load()
        res.other_cpu.append(other.stop())
        log(f"run {run}/{runs}: other processes used {res.other_cpu[-1].other:.2f} cores on "
            f"average, steal {res.other_cpu[-1].steal:.2f} cores, "
            f"load average {os.getloadavg()[0]:.2f}")
        if broker.pid:
            rss = rss_mib(broker.pid)
            if rss is not None:
                res.broker_rss_mib.append(rss)
    res.seconds = time.perf_counter() - start
    res.load_after = os.getloadavg()
    return res


def _verdict(passed: list[bool], median_ok: bool) -> str:
    return f"{'**pass**' if median_ok else '**MISS**'} ({sum(passed)}/{len(passed)} runs)"


def render(res: Results, broker: BenchBroker, size_name: str, size: Size, runs: int,
           argv: list[str]) -> str:
    cfg = KafkaWalConfig(**WAL_OPTIONS)
    max_bytes = ", ".join(f"{raw_message_max_bytes(s)} at {_fmt_size(s)}" for s in RECORD_SIZES)
    facts = machine_info(broker.description)
    facts["Load average (1/5/15 min) before / after"] = (
        f"{' '.join(f'{x:.2f}' for x in res.load_before)} / "
        f"{' '.join(f'{x:.2f}' for x in res.load_after)} (the machine may be shared); "
        f"highest 1-min load average after any case: {res.load_max:.2f}"
    )
    facts["CPU taken from the benchmark, per run: other processes / steal"] = (
        ", ".join(c.fmt() for c in res.other_cpu)
        + f" cores on average, of {os.cpu_count()} (other processes = system user+system "
        "time minus this process and the broker; steal = the hypervisor running other "
        "work on this VM's CPUs; 0 / 0 = a quiet machine). The load average counts the "
        "benchmark's own threads and broker too (about 1.5-2.5 while it runs)"
    )
    if res.broker_rss_mib:
        facts["Broker RSS after each run"] = ", ".join(f"{r:.0f} MiB" for r in res.broker_rss_mib)
    out: list[str] = [
        "# WAL benchmark results",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by "
        f"`python -m bench.wal_bench {shlex.join(argv)}` "
        f"(size `{size_name}`, {runs} runs per case, {res.seconds:.0f} s in all). "
        "Every cell is **median [min, max]** over the runs; MB = 10^6 bytes.",
        "",
        "## Machine",
        "",
        md_facts(facts),
        "",
        "## Configuration",
        "",
        md_facts({
            "Throughput runs": (
                f"{_fmt_size(size.bytes_per_run)} of payload per run and case "
                f"({', '.join(f'{size.bytes_per_run // s} x {_fmt_size(s)}' for s in RECORD_SIZES)}"
                "), split evenly over the writer threads; timed from the release of the "
                "threads until the last write() returned (WAL write), the last write_async "
                "Future resolved (WAL write_async) or `flush()` returned (raw); order per "
                "run and case: raw, raw blocking, write(), write_async"
            ),
            "KafkaWriteAheadLog": (
                f"defaults plus {WAL_OPTIONS}: chunk_bytes={cfg.chunk_bytes}, "
                f"linger_ms={cfg.linger_ms}, compression={cfg.compression}, "
                f"rolling_interval_ms={cfg.rolling_interval_ms}; producer acks=all, "
                "enable.idempotence=True (forced by the WAL); one fixed time_ms per run "
                "(one segment topic, no roll); a warm-up write creates the segment "
                "before timing; every returned handle checked (count, distinct offsets)"
            ),
            "WAL write() (blocking)": (
                "each writer thread calls write() back to back; each call returns after "
                "acks=all of all its frames (write() = write_async(...).result())"
            ),
            f"WAL write_async (pipelined, W={PIPELINE_DEPTH})": (
                f"each writer thread keeps up to {PIPELINE_DEPTH} write_async() Futures "
                "outstanding in a deque: when W are outstanding it waits for the oldest "
                "before the next write_async(); at the end it waits for all"
            ),
            "Raw produce (independent of the WAL settings)": (
                "one confluent-kafka Producer shared by the writer threads, config exactly "
                f"`{_raw_config_text()}` plus bootstrap.servers and `message.max.bytes` = "
                f"max(1000000, record + 64 KiB) (= {max_bytes}; only so a 1 MiB value "
                "fits); every other setting is librdkafka's default "
                "(linger.ms=5 is librdkafka's default too, the value BROKER.md measured with; "
                "batch.size=1000000). Asynchronous produce() of the whole value to partition "
                "0 with a delivery callback and poll(0) after each (poll(5 ms) and retry on "
                "BufferError), flush() at the end, every delivery checked; topic created "
                "with AdminClient (1 partition) and a warm-up record flushed before timing"
            ),
            "Raw produce, blocking": (
                "the same producer and topic set-up but with linger.ms=0 (a writer that "
                "waits for each record gains nothing from lingering), and each writer "
                "thread produces one record and waits for its delivery callback (served "
                "by a poller thread calling poll(50 ms)) before the next: the semantics "
                "of WAL write(), with "
                "no WAL code; the column 'Ratio to blocking raw' compares against it"
            ),
            "Events": (
                f"{EVENT_WRITERS} threads, each calling write() with {EVENT_BYTES}-byte events "
                f"back to back for {size.event_seconds:g} s; latency = time of each write() "
                "call; BatchedWriteAheadLog with default options over a KafkaWriteAheadLog "
                "configured as above; 'plain' = the same threads on a KafkaWriteAheadLog"
            ),
            "Clean-up": (
                "after each run: WAL clean(2**42, True), close(), delete the clean marker "
                "topic; raw: delete_topics"
            ),
        }),
        "",
        "## 1. Block-sized records: KafkaWriteAheadLog vs raw produce",
        "",
        f"Target: `KafkaWriteAheadLog.write()` (blocking) >= {RATIO_TARGET}x raw with 4 writers "
        "at both record sizes. The pipelined `write_async` row is an extra, with its own "
        "ratio and no target. Ratio = median WAL / median raw (in brackets: min and max of "
        "the per-run ratios, each WAL run divided by the raw run of the same run number, "
        "measured just before it).",
        "",
    ]
    rows = []
    for key in res.raw:
        record_size, writers = key
        raw = Stat.of(res.raw[key])
        blk = Stat.of(res.raw_blocking[key])
        rows.append([_fmt_size(record_size), str(writers), "raw produce", raw.fmt(), "1.00",
                     "—", "—", "—"])
        rows.append([_fmt_size(record_size), str(writers), "raw produce, blocking", blk.fmt(),
                     f"{blk.median / raw.median:.2f}", "1.00", "—", "—"])
        variants = [("WAL write() (blocking)", res.wal[key], True),
                    (f"WAL write_async (pipelined, W={PIPELINE_DEPTH})", res.wal_async[key],
                     False)]
        for label, values, has_target in variants:
            wal = Stat.of(values)
            paired = [w / r for w, r in zip(values, res.raw[key], strict=True)]
            ratio = wal.median / raw.median
            if has_target and writers == 4:
                target = f">= {RATIO_TARGET}x"
                verdict = _verdict([p >= RATIO_TARGET for p in paired], ratio >= RATIO_TARGET)
            else:
                target, verdict = "—", "—"
            rows.append([_fmt_size(record_size), str(writers), label, wal.fmt(),
                         f"{ratio:.2f} [{min(paired):.2f}, {max(paired):.2f}]",
                         f"{wal.median / blk.median:.2f}", target, verdict])
    out += [md_table(["Record", "Writers", "Variant", "MB/s", "Ratio to raw",
                      "Ratio to blocking raw", "Target", "Result"], rows), ""]

    out += [
        f"## 2. {EVENT_WRITERS} writers of {EVENT_BYTES}-byte events",
        "",
        f"Target (batched): >= {EVENTS_TARGET:.0f} events/s with p99 < {P99_TARGET_MS:g} ms.",
        "",
    ]
    rows = []
    for batched, evs in res.events.items():
        eps = Stat.of([e.events_per_s for e in evs])
        p50 = Stat.of([e.p50_ms for e in evs])
        p99 = Stat.of([e.p99_ms for e in evs])
        per_rec = Stat.of([e.events / max(1, e.kafka_records) for e in evs])
        if batched:
            target = f">= {EVENTS_TARGET:.0f}/s, p99 < {P99_TARGET_MS:g} ms"
            ok = [e.events_per_s >= EVENTS_TARGET and e.p99_ms < P99_TARGET_MS for e in evs]
            verdict = _verdict(ok, eps.median >= EVENTS_TARGET and p99.median < P99_TARGET_MS)
        else:
            target, verdict = "— (comparison)", "—"
        rows.append([
            "BatchedWriteAheadLog(KafkaWriteAheadLog)" if batched else "KafkaWriteAheadLog",
            str(EVENT_WRITERS), eps.fmt(0), p50.fmt(2), p99.fmt(2), per_rec.fmt(1), target,
            verdict,
        ])
    out += [md_table(["Log", "Writers", "Events/s", "p50 ms", "p99 ms", "Events per Kafka record",
                      "Target", "Result"], rows), ""]

    out += ["## Per-run values", ""]
    rows = []
    for key in res.raw:
        rows.append([f"{_fmt_size(key[0])} x{key[1]} raw MB/s",
                     ", ".join(f"{v:.1f}" for v in res.raw[key])])
        rows.append([f"{_fmt_size(key[0])} x{key[1]} raw blocking MB/s",
                     ", ".join(f"{v:.1f}" for v in res.raw_blocking[key])])
        rows.append([f"{_fmt_size(key[0])} x{key[1]} WAL write() MB/s",
                     ", ".join(f"{v:.1f}" for v in res.wal[key])])
        rows.append([f"{_fmt_size(key[0])} x{key[1]} WAL write_async MB/s",
                     ", ".join(f"{v:.1f}" for v in res.wal_async[key])])
    for batched, evs in res.events.items():
        label = "batched" if batched else "plain"
        rows.append([f"events {label}: events/s, p50, p99 ms", "; ".join(
            f"{e.events_per_s:.0f}, {e.p50_ms:.2f}, {e.p99_ms:.2f}" for e in evs)])
    out += [md_table(["Case", "Runs in order"], rows), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.wal_bench",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    p.add_argument("--out", type=Path, default=Path("bench/RESULTS-wal.md"))
    p.add_argument("--wal-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a KafkaWalConfig option for every WAL of the run (VALUE parsed as "
                        "JSON when it parses, e.g. linger_ms=2); the raw baseline does not "
                        "follow it (see RAW_PRODUCER_CONFIG); repeatable")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    WAL_OPTIONS.clear()
    WAL_OPTIONS.update(DEFAULT_WAL_OPTIONS)
    for item in args.wal_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--wal-option wants KEY=VALUE, got {item!r}")
        try:
            WAL_OPTIONS[key] = json.loads(value)
        except ValueError:
            WAL_OPTIONS[key] = value
    try:
        KafkaWalConfig(**WAL_OPTIONS)
    except Exception as exc:
        p.error(f"invalid --wal-option: {exc}")
    exit_on_sigterm()
    size = SIZES[args.size]
    with bench_broker() as broker:
        log(f"broker: {broker.description}")
        res = run_all(broker, size, args.runs)
        text = render(res, broker, args.size, size, args.runs, argv)
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
