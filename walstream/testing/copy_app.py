"""An app that copies one Kafka topic into a KafkaSink topic, for tests where several
writers share a sink topic.

``python -m walstream.testing.copy_app CHECKPOINT OUT_DIR --bootstrap B --input IN
--sink OUT --records N`` runs ``StreamingContext.getOrCreate(CHECKPOINT, ...)``: a
direct stream of ``IN`` from its start, each value written unchanged through
``KafkaSink(B, OUT)`` (its writer identity derived, unless ``--writer`` names
one). Once its batches have copied ``N`` records (counted on the driver after each
batch's output), it touches ``OUT_DIR/done``, stops gracefully and exits 0.
``--ha`` runs it with ``spark.walstream.ha.enabled=true``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="copy_app")
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--batch", type=float, default=0.5)
    ap.add_argument("--writer", default=None)
    ap.add_argument("--ha", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)

    from pyspark import SparkConf, SparkContext

    from walstream.driver import KafkaSink, KafkaUtils, StreamingContext
    from walstream.driver.spark import spark_environment

    counter = args.out / "copied"  # the records copied so far, kept by the driver

    def setup() -> StreamingContext:
        ssc = StreamingContext(SparkContext.getOrCreate(), args.batch)
        ssc.checkpoint(args.checkpoint)
        stream = KafkaUtils.createDirectStream(
            ssc, [args.input], {"bootstrap.servers": args.bootstrap,
                                "auto.offset.reset": "smallest"})
        values = stream.map(lambda kv: kv[1])
        values.foreachRDD(KafkaSink(args.bootstrap, args.sink, writer=args.writer))

        def count(_t: Any, rdd: Any) -> None:
            # Output operations run one at a time (one concurrent job), after the
            # sink's of the same batch; a file keeps the graph picklable.
            before = int(counter.read_text()) if counter.exists() else 0
            counter.write_text(str(before + rdd.count()))

        values.foreachRDD(count)
        return ssc

    spark_environment()
    conf = (SparkConf().setMaster(os.environ.get("WALSTREAM_SPARK_MASTER", "local[2]"))
            .setAppName("copy-app").set("spark.ui.enabled", "false")
            .set("spark.walstream.kafka.bootstrapServers", args.bootstrap))
    if args.ha:
        conf = (conf.set("spark.walstream.ha.enabled", "true")
                .set("spark.walstream.ha.leaseTimeout", "3s"))
    SparkContext.getOrCreate(conf).setLogLevel("ERROR")
    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    ssc.start()
    while not counter.exists() or int(counter.read_text() or 0) < args.records:
        if ssc.awaitTerminationOrTimeout(0.5):
            sys.exit("copy_app: the context stopped before every record was copied")
    (args.out / "done").touch()
    ssc.stop(stopSparkContext=True, stopGraceFully=True)


if __name__ == "__main__":
    main(sys.argv[1:])
