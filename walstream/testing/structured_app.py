"""A Structured Streaming query over a ``walstream`` source that a test kills and
restarts.

``python -m walstream.testing.structured_app CHECKPOINT SINK --name N --total T``:
a :class:`~walstream.testing.sequence_receiver.SequenceReceiver` (``item-0`` ..
``item-<T-1>``) read through ``format("walstream")`` and written by Spark's JSON
file sink to ``SINK`` with ``checkpointLocation=CHECKPOINT``, one micro-batch a
second. With ``--kafka-source TOPIC --kafka-sink TOPIC`` it reads the source
topic through ``option("source", "kafka")`` instead and writes each micro-batch
with ``foreachBatch`` into the exactly-once :class:`~walstream.driver.sink.kafka_sink.KafkaSink`.
Started again with the same arguments after a SIGKILL, the query resumes from
its checkpoint and the source from its logs. It runs until killed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("sink")
    ap.add_argument("--name", required=True)
    ap.add_argument("--total", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=500)
    ap.add_argument("--max-records-per-trigger", type=int, default=0)
    ap.add_argument("--clean-margin-ms", type=int, default=0,
                    help="the source's cleanMarginMs (0: its default)")
    ap.add_argument("--kafka-source", default="", help="read this topic (source kafka)")
    ap.add_argument("--kafka-sink", default="", help="foreachBatch into KafkaSink here")
    args = ap.parse_args()
    logging.basicConfig(level=os.environ.get("WALSTREAM_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from pyspark.sql import SparkSession

    import walstream
    from walstream.driver.spark import spark_environment

    spark_environment()
    spark = (SparkSession.builder.master(os.environ.get("WALSTREAM_SPARK_MASTER", "local[3]"))
             .appName("structured-app").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    walstream.register(spark)
    reader = spark.readStream.format("walstream").option("name", args.name)
    if args.kafka_source:
        reader = (reader.option("source", "kafka").option("topics", args.kafka_source)
                  .option("kafka.bootstrap.servers", os.environ["KAFKA_BOOTSTRAP_SERVERS"]))
    else:
        reader = (reader
                  .option("receiver", "walstream.testing.sequence_receiver:SequenceReceiver")
                  .option("receiver.args", json.dumps({"total": args.total,
                                                       "rate": args.rate})))
    reader = reader.option("decode", "utf-8")
    if args.clean_margin_ms:
        reader = reader.option("cleanMarginMs", str(args.clean_margin_ms))
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    writer = reader.load().writeStream.option("checkpointLocation", args.checkpoint)
    if args.kafka_sink:
        from walstream.driver.sink.kafka_sink import KafkaSink

        sink = KafkaSink(os.environ["KAFKA_BOOTSTRAP_SERVERS"], args.kafka_sink,
                         value=lambda row: row.value)
        writer = writer.foreachBatch(sink)
    else:
        writer = writer.format("json").option("path", args.sink)
    query = writer.trigger(processingTime="1 second").start()
    logging.getLogger("structured_app").info("query started")
    while query.isActive:
        time.sleep(1)
    query.awaitTermination()  # raises the query's error, if it failed


if __name__ == "__main__":
    main()
