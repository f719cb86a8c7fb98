"""A Structured Streaming word count over walstream receivers, checked exactly.

    python examples/structured_receiver_wordcount.py [--total N] [--checkpoint DIR]

The receiver is the built-in deterministic line generator
(``walstream.receiver.rate_receiver:RateGeneratorReceiver``): it stores ``N`` lines, each
block in its Kafka log before it is reported, and resumes after what the driver
acknowledged when it is relaunched. The query counts words with
``groupBy().count()`` in complete mode; when every line is in, the counts are
compared with the ones the generator's lines give, and the script exits 1 if
any word is short or doubled. Restarted with the same ``--checkpoint`` and
``--name`` after a kill, it resumes from its checkpoint and the source's logs.

What differs from a DStream app (``examples/stateful_network_wordcount.py``):

* ``walstream.register(spark)`` once, then ``spark.readStream.format("walstream")``
  instead of ``ssc.receiverStream(...)``; there is no StreamingContext, no batch
  interval (a trigger instead) and no ``getOrCreate``: the query's
  ``checkpointLocation`` holds its offsets and state.
* The receiver is named as ``"package.module:Class"`` with JSON arguments, since
  Spark builds data sources from string options.
* The source's ``name`` option names its Kafka logs: a restarted query must use
  the same one, as it must use the same checkpoint location.
* Rows are ``value``, ``stream_id``, ``block_id`` and ``received_time``, not the
  receiver's Python objects: items are str or bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split

import walstream
from walstream.receiver.rate_receiver import generated_line

SEED = 7


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total", type=int, default=20_000, help="lines to generate")
    ap.add_argument("--rate", type=float, default=4_000, help="lines per second")
    ap.add_argument("--name", default="structured-wordcount",
                    help="the source's name (its Kafka logs)")
    ap.add_argument("--checkpoint", default="", help="the query's checkpointLocation")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    expected = Counter(w for i in range(args.total) for w in generated_line(SEED, i).split())

    spark = SparkSession.builder.appName("StructuredReceiverWordCount").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    walstream.register(spark)
    lines = (spark.readStream.format("walstream")
             .option("name", args.name)
             .option("receiver", "walstream.receiver.rate_receiver:RateGeneratorReceiver")
             .option("receiver.args", json.dumps(
                 {"rate": args.rate, "seed": SEED, "total": args.total}))
             .option("decode", "utf-8")
             .load())
    words = lines.select(explode(split(lines.value, " ")).alias("word"))
    counts = words.groupBy("word").count()
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="structured-wordcount-")
    query = (counts.writeStream.outputMode("complete").format("memory")
             .queryName("word_counts").option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 second").start())
    got: Counter[str] = Counter()
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            got = Counter({r.word: r["count"] for r in spark.table("word_counts").collect()})
            if sum(got.values()) >= sum(expected.values()):
                break
            time.sleep(1)
        time.sleep(2)  # two triggers more: nothing may be counted twice
        got = Counter({r.word: r["count"] for r in spark.table("word_counts").collect()})
    finally:
        query.stop()
        spark.stop()
    for word, n in got.most_common(10):
        print(f"{word}: {n}")
    short, doubled = expected - got, got - expected
    print(f"{sum(got.values())} words counted, {sum(expected.values())} expected; "
          f"short {sum(short.values())}, doubled {sum(doubled.values())}")
    if short or doubled:
        print("NOT EXACT", file=sys.stderr)
        return 1
    print("exact: every word counted once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
