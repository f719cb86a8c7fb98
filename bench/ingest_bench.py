"""Ingest benchmark: Kafka source -> receiver blocks in the WAL -> reported to the driver.

Usage (from the repo root)::

    python -m bench.ingest_bench [--size small|full] [--runs N] [--cluster/--no-cluster]
        [--block-interval-ms MS] [--max-block-records N] [--chunk-bytes B]
        [--profile/--no-profile] [--out bench/results/RESULTS-ingest.md]

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
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import (
    RAW_PRODUCER_CONFIG,
    admin_client,
    bench_broker,
    create_topic,
    delete_topics,
    exit_on_sigterm,
    log,
    machine_info,
    rss_mib,
    topics_with_prefix,
    write_results,
)
from bench.ingest_config import (
    CLEAN_ALL_MS,
    MB,
    POLL_S,
    RECORD_SIZES,
    SIZES,
    WAL_TOPIC_PREFIX,
    IngestConfig,
    Results,
    RunResult,
    Size,
    warm_driver_wal,
)
from bench.ingest_profile import profile_run
from bench.ingest_render import render
from walstream.kafka_logging import with_logger
from walstream.testing.standalone import standalone_cluster

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

    producer = Producer(with_logger({"bootstrap.servers": bootstrap, **RAW_PRODUCER_CONFIG}))
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


def raw_consume(bootstrap: str, topic: str, n: int) -> float:
    """Seconds for a bare confluent-kafka consumer (fresh group, batches of 10,000,
    every value touched) to read ``n`` records of ``topic`` from its start, counted
    from the consumer's creation like a receiver's time from its registration: what
    reading the source alone costs on this broker, the ceiling of any pipeline that
    starts with it."""
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.perf_counter()
    consumer = Consumer(with_logger({
        "bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
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


def receiver_run(sc: Any, bootstrap: str, admin: Any, sources: Sequence[tuple[str, int]],
                 cfg: IngestConfig, timeout_s: float) -> RunResult:
    """One run: a receiver per ``(topic, records)`` source; see the module docstring."""
    from walstream.driver.receiver_tracker.tracker import ReceiverTracker
    from walstream.driver.scheduler.listener import StreamingListenerReceiverStarted
    from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
    from walstream.receiver import KafkaReceiver
    from walstream.receiver.task import ReceiverTaskSpec
    from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog

    app = f"bench-ingest-{uuid.uuid4().hex[:8]}"
    ids = list(range(len(sources)))
    registered: dict[int, float] = {}

    def listener(event: type[Any], stream_id: int, detail: str) -> None:
        if event is StreamingListenerReceiverStarted:
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
        delete_topics(admin, topics_with_prefix(admin, f"{WAL_TOPIC_PREFIX}{app}"))
        del tracker, blocks, specs
        gc.collect()  # drop the run's clients now, not when the broker is gone


def _wait_executors(sc: Any, n: int, timeout_s: float = 90.0) -> list[Any]:
    from walstream.driver.receiver_tracker.scheduling import executors_of

    deadline = time.monotonic() + timeout_s
    while True:
        found = [e for e in executors_of(sc) if e.executor_id != "driver"]
        if len(found) >= n:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"only executors {found} after {timeout_s}s")
        time.sleep(0.5)


# -- running it all -------------------------------------------------------------------------


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
    rss = rss_mib(pid)
    return "unknown" if rss is None else f"{rss:.0f} MiB"


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
    from walstream.driver.spark import create_spark_context

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
    from walstream.driver.spark import create_spark_context

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


# -- the load around the runs ------------------------------------------------------------------


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
    p.add_argument("--out", type=Path, default=Path("bench/results/RESULTS-ingest.md"))
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
    exit_on_sigterm()
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
