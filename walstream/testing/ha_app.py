"""A word count run twice at once under high availability: one leader, one hot standby.

``python -m walstream.testing.ha_app CHECKPOINT_DIR OUT_DIR --sink TOPIC --total N``
runs ``StreamingContext.getOrCreate`` with ``spark.walstream.ha.enabled=true``: a
deterministic generator receiver (exactly once across takeovers) and, with
``--direct-topic T``, a direct Kafka stream of ``T`` (the chaos harness's versioned
lines, bad ones skipped; its words tagged ``d <word>``) -> words ->
per-batch counts to the ``TOPIC`` Kafka topic through :class:`driver.KafkaSink`,
and ``updateStateByKey`` running totals, written to ``OUT_DIR/totals.json`` keyed
by nothing (each batch replaces it). Every process started with the same
checkpoint directory shares the app id, so the first to claim the lease leads and
the others stand by. ``OUT_DIR/progress.jsonl`` gets each completed batch with the
process id (:func:`~walstream.testing.chaos_app.progress_recorder`);
``OUT_DIR/roles.jsonl`` each process's role when its start returned. The process
logs at INFO to standard error (the test reads the takeover lines there). With
``--per-batch-outputs`` it also writes what a user's own ``foreachRDD`` outputs
would, per batch time (files under ``OUT_DIR/by-time``, lines appended to
``OUT_DIR/counts.jsonl``), each marked with the writing process, so a checker can
tell a batch written twice with different contents (split brain).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from walstream.testing import chaos_app
from walstream.testing.batch_outputs import add_per_batch_outputs
from walstream.testing.recovery_app import _write, expected_counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="ha_app")
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--total", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=500)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--batch", type=float, default=1.0)
    ap.add_argument("--lease-timeout", default="1s")
    ap.add_argument("--direct-topic", default="")
    ap.add_argument("--kafka-receiver", action="store_true",
                    help="also read the direct topic through the receiver-based Kafka "
                         "stream (its words tagged 'k') and a reliable custom receiver "
                         "that commits a consumer group's offsets (tagged 'r'; its "
                         "executors must see OUT_DIR: it journals each block's steps to "
                         "OUT_DIR/reliable-blocks.jsonl)")
    ap.add_argument("--per-batch-outputs", action="store_true",
                    help="also write what a user's own output operations would: each "
                         "batch's running totals to OUT_DIR/by-time/<batch ms>.json (the "
                         "last write wins) and to <batch ms>.<pid>.json (what this process "
                         "wrote), and each batch's word counts appended to "
                         "OUT_DIR/counts.jsonl with the batch time and the pid")
    ap.add_argument("--slow-output", type=float, default=0.0,
                    help="seconds an extra output operation sleeps in every batch (so a "
                         "batch's two checkpoints, generated and completed, are that far "
                         "apart)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    expected_total = sum(expected_counts(args.seed, args.total).values())

    from pyspark import SparkConf, SparkContext

    from walstream.driver import KafkaSink, KafkaUtils, StreamingContext
    from walstream.driver.spark import spark_environment
    from walstream.receiver.rate_receiver import RateGeneratorReceiver
    from walstream.testing.committing_receiver import CommittingKafkaReceiver

    out, sink_topic, bootstrap = str(args.out), args.sink, args.bootstrap
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(chaos_app)  # decode_value runs in tasks
    from walstream.testing import committing_receiver

    cloudpickle.register_pickle_by_value(committing_receiver)

    def setup() -> StreamingContext:
        ssc = StreamingContext(SparkContext.getOrCreate(), args.batch)
        ssc.checkpoint(args.checkpoint)
        lines = ssc.receiverStream(RateGeneratorReceiver(args.rate, args.seed, args.total))
        words = lines.flatMap(lambda line: line.split())
        if args.direct_topic:
            direct = KafkaUtils.createDirectStream(
                ssc, [args.direct_topic], {"bootstrap.servers": bootstrap,
                                           "auto.offset.reset": "smallest"},
                valueDecoder=chaos_app.decode_value)
            words = words.union(direct.flatMap(lambda kv: ["d " + w for w in kv[1].split()]))
        if args.direct_topic and args.kafka_receiver:
            received = KafkaUtils.createStream(
                ssc, bootstrap, "ha-app-receiver", {args.direct_topic: 1},
                {"auto.offset.reset": "smallest"}, valueDecoder=chaos_app.decode_value)
            words = words.union(received.flatMap(
                lambda kv: ["k " + w for w in kv[1].split()]))
            reliable = ssc.receiverStream(CommittingKafkaReceiver(
                bootstrap, args.direct_topic, "ha-app-reliable",
                journal=str(Path(out) / "reliable-blocks.jsonl")))
            words = words.union(reliable.flatMap(lambda line: ["r " + w for w in line.split()]))
        pairs = words.map(lambda w: (w, 1))
        pairs.reduceByKey(lambda a, b: a + b, 1).foreachRDD(
            KafkaSink(bootstrap, sink_topic, value=lambda kv: f"{kv[0]}\t{kv[1]}"))

        def update(new: list[int], old: int | None) -> int:
            return sum(new) + (old or 0)

        totals = pairs.updateStateByKey(update, 1)
        totals.checkpoint(2 * args.batch)

        def save_totals(t: Any, rdd: Any) -> None:
            state = dict(rdd.collect())
            _write(Path(out) / "totals.json", state)
            if sum(n for w, n in state.items() if not w.startswith("d ")) >= expected_total:
                (Path(out) / "done").touch()

        totals.foreachRDD(save_totals)
        if args.per_batch_outputs:
            add_per_batch_outputs(totals, pairs, out)
        if args.slow_output > 0:
            pause = args.slow_output
            totals.foreachRDD(lambda t, rdd: time.sleep(pause))
        return ssc

    spark_environment()
    conf = (SparkConf().setMaster(os.environ.get("WALSTREAM_SPARK_MASTER", "local[2]"))
            .setAppName("ha-app").set("spark.ui.enabled", "false")
            .set("spark.walstream.ha.enabled", "true")
            .set("spark.walstream.ha.leaseTimeout", args.lease_timeout)
            .set("spark.walstream.kafka.bootstrapServers", bootstrap))
    SparkContext.getOrCreate(conf).setLogLevel("ERROR")
    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    ssc.addStreamingListener(chaos_app.progress_recorder(args.out))
    stop_asked = threading.Event()
    # SIGTERM is a planned handover: stop gracefully (receivers stopped, what they
    # received processed, then the lease released) and exit 0.
    signal.signal(signal.SIGTERM, lambda *_: stop_asked.set())
    ssc.start()
    role = ssc.ha_role  # the test app reports its role
    with open(args.out / "roles.jsonl", "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "role": role, "wall": time.time()}) + "\n")
    while not stop_asked.is_set():
        if ssc.awaitTerminationOrTimeout(0.2):
            ssc.awaitTermination()  # raises why it stopped
            return
    logging.getLogger("ha_app").info("SIGTERM: stopping gracefully")
    ssc.stop(stopSparkContext=True, stopGraceFully=True)
    logging.getLogger("ha_app").info("stopped gracefully")


if __name__ == "__main__":
    main(sys.argv[1:])
