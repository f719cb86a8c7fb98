"""The ingest benchmark's Markdown report (``bench/results/RESULTS-ingest.md``)."""

from __future__ import annotations

import argparse
import shlex

from bench.common import RAW_PRODUCER_CONFIG, Stat, md_facts, md_table
from bench.ingest_config import (
    CASE_TITLES,
    CEILING_TARGET,
    CEILING_TARGET_SIZE,
    MB,
    RATIO_TARGET,
    RECORD_SIZES,
    IngestConfig,
    Results,
)


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
            if size == CEILING_TARGET_SIZE:
                # Three decimals: a median just under the target must not print as it.
                met = "met" if per.median >= CEILING_TARGET else "missed"
                ceiling.append(f"- {size} B, 1 receiver against the read ceiling: "
                               f"{per.median:.3f}x (target {CEILING_TARGET}x) -> **{met}**")
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
