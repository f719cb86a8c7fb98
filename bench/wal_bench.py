"""WAL benchmark: KafkaWriteAheadLog vs raw confluent-kafka produce, and batched small events.

Usage (from the repo root)::

    python -m bench.wal_bench [--size small|full] [--runs N] [--out bench/results/RESULTS-wal.md]

Cases, all against one broker in one process (``KAFKA_BOOTSTRAP_SERVERS`` when set,
else an embedded in-memory Tansu on 127.0.0.1 that is always stopped):

1. Throughput of block-sized records (64 KiB and 1 MiB) from 1 and 4 writer threads:
   raw asynchronous ``Producer.produce`` of the same payload bytes to a 1-partition
   topic with a well-tuned stand-alone producer (:data:`RAW_PRODUCER_CONFIG`: ``acks=all``,
   idempotent, librdkafka's default ``linger.ms=5``, delivery callbacks, ``flush`` at
   the end; independent of the WAL's settings), next to ``KafkaWriteAheadLog.write``
   (blocks until ``acks=all``) and ``KafkaWriteAheadLog.write_async`` pipelined (each
   writer keeps up to :data:`bench.wal_cases.PIPELINE_DEPTH` writes outstanding), each
   with its ratio to raw. Target: ``write()`` >= 0.7x raw with 4 writers at both sizes
   (the pipelined variant is reported alongside, without a target).
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
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    BenchBroker,
    CpuNoise,
    OtherCpu,
    Stat,
    bench_broker,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    rss_mib,
    write_results,
)
from bench.wal_cases import (
    DEFAULT_WAL_OPTIONS,
    EVENT_BYTES,
    EVENT_WRITERS,
    MIB,
    PIPELINE_DEPTH,
    RECORD_SIZES,
    WAL_OPTIONS,
    WRITER_COUNTS,
    EventRun,
    event_run,
    fmt_size,
    raw_config_text,
    raw_message_max_bytes,
    raw_throughput,
    wal_throughput,
)
from walstream.wal import KafkaWalConfig

RATIO_TARGET = 0.7  # write() with 4 writers, against raw produce
EVENTS_TARGET = 5000.0  # batched small events per second
P99_TARGET_MS = 50.0  # batched small events' write latency


@dataclass(frozen=True)
class Size:
    bytes_per_run: int  # payload bytes written per throughput run, per case
    event_seconds: float  # measured duration of one event run


SIZES = {
    "small": Size(bytes_per_run=16 * MIB, event_seconds=1.0),
    "full": Size(bytes_per_run=160 * MIB, event_seconds=5.0),
}


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
                log(f"run {run}/{runs} {fmt_size(record_size):>7} x{writers}: "
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
    max_bytes = ", ".join(f"{raw_message_max_bytes(s)} at {fmt_size(s)}" for s in RECORD_SIZES)
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
                f"{fmt_size(size.bytes_per_run)} of payload per run and case "
                f"({', '.join(f'{size.bytes_per_run // s} x {fmt_size(s)}' for s in RECORD_SIZES)}"
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
                f"`{raw_config_text()}` plus bootstrap.servers and `message.max.bytes` = "
                f"max(1000000, record + 64 KiB) (= {max_bytes}; only so a 1 MiB value "
                "fits); every other setting is librdkafka's default "
                "(linger.ms=5 is librdkafka's default too; "
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
        rows.append([fmt_size(record_size), str(writers), "raw produce", raw.fmt(), "1.00",
                     "—", "—", "—"])
        rows.append([fmt_size(record_size), str(writers), "raw produce, blocking", blk.fmt(),
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
            rows.append([fmt_size(record_size), str(writers), label, wal.fmt(),
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
        rows.append([f"{fmt_size(key[0])} x{key[1]} raw MB/s",
                     ", ".join(f"{v:.1f}" for v in res.raw[key])])
        rows.append([f"{fmt_size(key[0])} x{key[1]} raw blocking MB/s",
                     ", ".join(f"{v:.1f}" for v in res.raw_blocking[key])])
        rows.append([f"{fmt_size(key[0])} x{key[1]} WAL write() MB/s",
                     ", ".join(f"{v:.1f}" for v in res.wal[key])])
        rows.append([f"{fmt_size(key[0])} x{key[1]} WAL write_async MB/s",
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
    p.add_argument("--out", type=Path, default=Path("bench/results/RESULTS-wal.md"))
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
