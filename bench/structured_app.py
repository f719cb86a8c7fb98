"""The Structured Streaming word count the structured benchmark runs, for both
systems but for its source.

``--impl ours``: ``readStream.format("walstream").option("source", "socket")`` (a
receiver that stores every block in its Kafka log before reporting it);
``--impl spark``: Spark's built-in ``format("socket")`` (no log: lines in the
driver's memory only). The query: split, explode, ``groupBy(word).count()`` per
micro-batch in ``foreachBatch``, a trigger a second, a checkpoint location. A
listener appends one JSON line per micro-batch to ``--out``: its start, input
rows, words counted, trigger duration and the wall time it completed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from datetime import datetime
from typing import Any

_WORDS: dict[int, int] = {}
_LOCK = threading.Lock()


def _ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--impl", choices=["spark", "ours"], required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="structured-bench")
    args = ap.parse_args(argv)
    logging.basicConfig(level=os.environ.get("WALSTREAM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, explode, split
    from pyspark.sql.streaming import StreamingQueryListener

    spark = (SparkSession.builder.master("local[3]").appName(f"structured-bench-{args.impl}")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "3")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 (closed at exit)
    out.write(json.dumps({"event": "session", "wall": time.time()}) + "\n")

    class Recorder(StreamingQueryListener):
        last_start: int | None = None

        def onQueryStarted(self, event: Any) -> None:
            out.write(json.dumps({"event": "started", "wall": time.time()}) + "\n")

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            start = _ms(p.timestamp)
            prev, self.last_start = self.last_start, start
            with _LOCK:
                words = _WORDS.pop(int(p.batchId), 0)
            out.write(json.dumps({
                "batch": int(p.batchId), "t": start + 1000, "records": int(p.numInputRows),
                "words": words, "processing_ms": int(p.durationMs.get("triggerExecution", 0)),
                "scheduling_ms": 0 if prev is None else max(0, start - prev - 1000),
                "wall": time.time()}) + "\n")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Recorder())
    if args.impl == "ours":
        import walstream

        walstream.register(spark)
        reader = (spark.readStream.format("walstream").option("name", args.name)
                  .option("source", "socket").option("decode", "utf-8"))
    else:
        reader = spark.readStream.format("socket")
    lines = reader.option("host", "127.0.0.1").option("port", str(args.port)).load()
    words = lines.select(explode(split(col("value"), " ")).alias("word"))

    def count(batch: Any, batch_id: int) -> None:
        n = sum(r["count"] for r in batch.groupBy("word").count().collect())
        with _LOCK:
            _WORDS[int(batch_id)] = n

    query = (words.writeStream.foreachBatch(count)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="1 second").start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
