"""The word count the multi-host test submits, and the tools it runs on the cluster's hosts.

``spark-submit .../multihost_app.py app CKPT OUT --bootstrap B --receiver-topic R
--direct-topic D --sink S``: ``StreamingContext.getOrCreate(CKPT, setup)``, where
setup reads ``R`` with ``KafkaUtils.createStream`` (a receiver, through its WAL)
and ``D`` with ``KafkaUtils.createDirectStream``; values are the chaos harness's
versioned lines (:func:`~walstream.testing.chaos_app.decode_value`, bad records
skipped). Words are tagged by the stream they came in on (``r <word>``,
``d <word>``), so each stream is counted on its own. Outputs:

* per-batch counts to the ``S`` topic through :class:`driver.KafkaSink`
  (``<tag> <word>\\t<n>``; :func:`read_counts` reads them exactly once);
* running totals (``updateStateByKey``, checkpointed) to ``OUT/totals.json``;
* with ``--per-batch-outputs``, what a user's own output operations would write
  per batch time (:mod:`walstream.testing.batch_outputs`);
* ``OUT/progress.jsonl`` (each completed batch: wall time, records per input
  stream), ``OUT/receivers.jsonl`` (each receiver start: its
  ``host:daemon-pid:worker-pid``), ``OUT/started.jsonl`` (each context start)
  and ``OUT/errors.jsonl`` (receiver errors: the bad records).

``spark-submit .../multihost_app.py query CKPT OUT --bootstrap B --name N --topic T
--sink S``: the same word count as a Structured Streaming query over
``format("walstream")`` (the source's Kafka receiver reads ``T``), tagged ``s``,
its micro-batch counts written through ``KafkaSink`` by ``foreachBatch``
(:func:`run_query`).

Executors get no ``walstream.testing`` (``walstream package`` leaves it out):
what runs on them is defined in this file, which spark-submit runs as
``__main__`` and cloudpickle therefore ships by value, or is ``decode_value``,
registered to be pickled by value too.

The other subcommands run with the repository's Python on a host that sees it:
``topics`` creates the topics, ``feed`` produces seeded lines with
:class:`~walstream.testing.chaos_feeder.Feeder` and prints what the broker
acknowledged, ``read`` prints the sink's counts, ``forge`` sends a receiver's
Register and AddBlock to a driver endpoint without the application's secret
and prints how each was answered.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from walstream.errors import WalStreamError
from walstream.testing import chaos_app
from walstream.testing.chaos_app import decode_value
from walstream.testing.recovery_app import _write

TAGS = {"receiver": "r", "direct": "d", "structured": "s"}


def run_app(args: argparse.Namespace) -> None:
    from pyspark import SparkConf, SparkContext, cloudpickle

    from walstream.driver import KafkaSink, KafkaUtils, StreamingContext

    cloudpickle.register_pickle_by_value(chaos_app)
    # The driver's own lines (receivers, restarts, each batch's blocks) go to the
    # log the test shows when a check fails.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("walstream.driver.dstream.receiver_input_stream").setLevel(logging.DEBUG)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    outd, bootstrap, batch = str(out), args.bootstrap, args.batch

    def setup() -> StreamingContext:
        sc = SparkContext.getOrCreate(SparkConf().setAppName("walstream-multihost-wordcount"))
        ssc = StreamingContext(sc, batch)
        ssc.checkpoint(args.checkpoint)
        received = KafkaUtils.createStream(ssc, bootstrap, "multihost", {args.receiver_topic: 1},
                                           {"auto.offset.reset": "earliest"},
                                           valueDecoder=decode_value)
        direct = KafkaUtils.createDirectStream(
            ssc, [args.direct_topic], {"bootstrap.servers": bootstrap,
                                       "auto.offset.reset": "smallest"},
            valueDecoder=decode_value)
        words = received.flatMap(lambda kv: ["r " + w for w in kv[1].split()]).union(
            direct.flatMap(lambda kv: ["d " + w for w in kv[1].split()]))
        pairs = words.map(lambda w: (w, 1))
        counts = pairs.reduceByKey(lambda a, b: a + b, 1)
        counts.foreachRDD(KafkaSink(bootstrap, args.sink, value=lambda kv: f"{kv[0]}\t{kv[1]}"))

        def update(new: list[int], old: int | None) -> int:
            return sum(new) + (old or 0)

        totals = pairs.updateStateByKey(update, 1)
        totals.checkpoint(2 * batch)

        def save_totals(t: Any, rdd: Any) -> None:
            _write(Path(outd) / "totals.json", dict(rdd.collect()))

        totals.foreachRDD(save_totals)
        if args.per_batch_outputs:
            from walstream.testing.batch_outputs import add_per_batch_outputs

            add_per_batch_outputs(totals, pairs, outd)
        return ssc

    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    # Here, not in setup: a restart restores the context without calling it.
    ssc.sparkContext.setLogLevel("ERROR")
    ssc.addStreamingListener(chaos_app.progress_recorder(out))
    ssc.start()
    ssc.awaitTermination()


def _structured_words(value: bytes | None) -> list[str]:
    """The words of one source row, tagged ``s``; none for a bad record."""
    try:
        return ["s " + w for w in decode_value(value).split()]
    except (ValueError, WalStreamError):
        return []


def run_query(args: argparse.Namespace) -> None:
    """A Structured Streaming query: ``format("walstream")`` reading ``--topic`` with
    the source's Kafka receiver, each micro-batch's word counts written by
    ``foreachBatch`` through :class:`driver.KafkaSink` to ``--sink`` (one partition,
    sorted, so a re-run micro-batch writes what its first run did), and a line per
    micro-batch in ``OUT/progress.jsonl`` (wall time, id, records)."""
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    import walstream
    from walstream.driver import KafkaSink

    cloudpickle.register_pickle_by_value(chaos_app)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    spark = SparkSession.builder.appName("walstream-multihost-query").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    walstream.register(spark)
    rows = (spark.readStream.format("walstream").option("name", args.name)
            .option("source", "kafka").option("topics", args.topic)
            .option("kafka.bootstrap.servers", args.bootstrap).load())
    sink = KafkaSink(args.bootstrap, args.sink, value=lambda r: f"{r.word}\t{r.n}")

    def each_batch(batch: Any, batch_id: int) -> None:
        counts = sorted(batch.rdd.flatMap(lambda r: _structured_words(r.value))
                        .map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 1).collect())
        sink(spark.createDataFrame(counts, "word string, n long").coalesce(1), batch_id)
        chaos_app._append(out / "progress.jsonl", {
            "wall": time.time(), "batch": batch_id, "records": sum(n for _, n in counts)})

    query = (rows.writeStream.option("checkpointLocation", args.checkpoint)
             .foreachBatch(each_batch).trigger(processingTime=f"{args.batch} seconds").start())
    query.awaitTermination()  # raises the query's error, if it failed


def create_topics(args: argparse.Namespace) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from walstream.kafka_logging import with_logger

    admin = AdminClient(with_logger({"bootstrap.servers": args.bootstrap}))
    for t in args.topics:
        admin.create_topics([NewTopic(t, 1, -1)])[t].result(timeout=60)
    print(json.dumps({"created": args.topics}), flush=True)


def feed(args: argparse.Namespace) -> None:
    """One :class:`Feeder` per ``TOPIC:SEED``; prints, per topic, the words of the
    good lines the broker acknowledged, the counts of good and bad records and any
    delivery failure."""
    from walstream.testing.chaos_config import ChaosConfig
    from walstream.testing.chaos_feeder import Feeder

    feeders = []
    for spec in args.topic:
        topic, _, seed = spec.rpartition(":")
        cfg = ChaosConfig(records=args.records, rate=args.rate, seed=int(seed),
                          bad_every=args.bad_every)
        feeders.append(Feeder(args.bootstrap, topic, cfg))
    for f in feeders:
        f.start()
    for f in feeders:
        f.join(args.timeout)
    print(json.dumps({f.topic: {"expected": dict(f.expected), "good": f.good, "bad": f.bad,
                                "failed": f.failed if f.done.is_set() else ["not finished"]}
                      for f in feeders}), flush=True)


def read_counts(bootstrap: str, sink: str) -> dict[str, Any]:
    """The sink's per-batch counts read exactly once, summed per stream tag and word,
    and the attempts with a commit marker that lacked records (torn)."""
    from walstream.driver.sink.kafka_sink import read_exactly_once

    counts: dict[str, Counter[str]] = {tag: Counter() for tag in TAGS.values()}
    batches: set[int] = set()
    skipped: list[dict[str, Any]] = []

    def torn(s: Any) -> None:  # a re-run of a partition already read is not torn
        if not s.rerun:
            skipped.append({"batch": s.batch_ms, "part": s.part, "records": s.records,
                            "count": s.count})

    for batch_ms, _, value in read_exactly_once(bootstrap, sink, kafka_conf={},
                                                on_skipped=torn):
        key, _, n = (value or b"").decode().rpartition("\t")
        tag, _, word = key.partition(" ")
        counts[tag][word] += int(n)
        batches.add(batch_ms)
    return {"counts": {tag: dict(c) for tag, c in counts.items()}, "batches": len(batches),
            "torn attempts": skipped}


def forge(args: argparse.Namespace) -> None:
    """A Register and an AddBlock as a receiver of stream ``--stream`` would send
    them, once with no secret and once with a guessed one; prints each answer."""
    import grpc

    from walstream.receiver.block import SourceRange
    from walstream.receiver.block_info import ReceivedBlockInfo
    from walstream.receiver.driver_client import DriverClient
    from walstream.rpc.auth import EndpointCredentials
    from walstream.wal.handle import RecordHandle

    def attempt(call: Any) -> dict[str, Any]:
        try:
            answer = call()
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, grpc.RpcError) else exc
            code = cause.code() if isinstance(cause, grpc.RpcError) else None
            return {"refused": True, "error": type(exc).__name__,
                    "code": code.name if code is not None else None, "message": str(exc)}
        return {"refused": False, "answer": repr(answer)}

    results = {}
    for label, credentials in (("no secret", None), ("guessed secret",
                                                     EndpointCredentials.generate())):
        client = DriverClient(args.address, timeout_s=args.timeout, credentials=credentials)
        try:
            results[f"register, {label}"] = attempt(lambda c=client: c.register_receiver(
                args.stream, "forger", "forged-executor", "KafkaReceiver"))
            # A block that would skip the receiver past records it never stored.
            block = ReceivedBlockInfo(
                args.stream, f"forged-{label.replace(' ', '-')}", 1000,
                RecordHandle("walstream.wal.forged", 0, 0),
                (SourceRange(args.source_topic, 0, 0, 1_000_000),))
            results[f"add_block, {label}"] = attempt(lambda c=client, b=block: c.add_block(b))
        finally:
            client.close()
    print(json.dumps(results), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="multihost_app")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("app")
    a.add_argument("checkpoint")
    a.add_argument("out", type=Path)
    a.add_argument("--bootstrap", required=True)
    a.add_argument("--receiver-topic", required=True)
    a.add_argument("--direct-topic", required=True)
    a.add_argument("--sink", required=True)
    a.add_argument("--batch", type=float, default=2.0)
    a.add_argument("--per-batch-outputs", action="store_true",
                   help="also write what a user's own output operations would, per batch "
                        "time (walstream.testing.batch_outputs, on the driver)")
    q = sub.add_parser("query")
    q.add_argument("checkpoint")
    q.add_argument("out", type=Path)
    q.add_argument("--bootstrap", required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--sink", required=True)
    q.add_argument("--batch", type=float, default=2.0)
    t = sub.add_parser("topics")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("topics", nargs="+")
    f = sub.add_parser("feed")
    f.add_argument("--bootstrap", required=True)
    f.add_argument("--topic", action="append", required=True, help="TOPIC:SEED")
    f.add_argument("--records", type=int, required=True)
    f.add_argument("--rate", type=float, required=True)
    f.add_argument("--bad-every", type=int, default=500)
    f.add_argument("--timeout", type=float, default=300)
    r = sub.add_parser("read")
    r.add_argument("--bootstrap", required=True)
    r.add_argument("--sink", required=True)
    g = sub.add_parser("forge")
    g.add_argument("--address", required=True)
    g.add_argument("--stream", type=int, default=0)
    g.add_argument("--source-topic", required=True)
    g.add_argument("--timeout", type=float, default=20)
    args = ap.parse_args(argv)
    if args.command == "app":
        run_app(args)
    elif args.command == "query":
        run_query(args)
    elif args.command == "topics":
        create_topics(args)
    elif args.command == "feed":
        feed(args)
    elif args.command == "read":
        print(json.dumps(read_counts(args.bootstrap, args.sink)), flush=True)
    else:
        forge(args)


if __name__ == "__main__":
    main(sys.argv[1:])
