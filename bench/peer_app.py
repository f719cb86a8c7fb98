"""The peer benchmark's word-count app, one file for both systems.

Run by ``bench.peer_bench`` as a subprocess::

    python -c 'import sys, bench.peer_app as a; sys.exit(a.main())' --impl spark|ours|ours-ha \
        --port P --batch-s 1 --checkpoint DIR --out F [--block-interval-ms MS] \
        [--extra-ports P2,P3,... --master local[N]]

The context comes from ``StreamingContext.getOrCreate(checkpoint, setup)``, so the
recovery benchmark can SIGKILL the app and start the same command again. While the
file named by ``PEER_GATE`` exists the output operation waits (a slow sink): batches
queue up with their blocks, which is how the recovery benchmark builds a backlog.

``--extra-ports`` adds one more ``socketTextStream`` (one more receiver) per port,
all unioned into the one word count; the recovery benchmark uses them to build a
large backlog sooner (each receiver cuts its own block per interval). Shuffles keep
3 partitions (``spark.default.parallelism``) whatever ``--master`` says, so a
master with more slots for the receivers does not change the job.

(imported, not ``-m``: both systems pickle the graph into the checkpoint, and the
output function below is then pickled by reference, with its lock left behind).

The two variants differ only in their import lines, as a user's port would:
``--impl spark`` is ``pyspark.streaming`` with Spark's receiver write-ahead log
(``spark.streaming.receiver.writeAheadLog.enable=true``, checkpoint on local disk,
a non-replicated serialized storage level as Spark's guide recommends with the WAL);
``--impl ours`` is ``driver`` (blocks in the Kafka WAL of ``KAFKA_BOOTSTRAP_SERVERS``).
``--impl ours-ha`` is ``ours`` with ``spark.walstream.ha.enabled=true`` and nothing
else changed: the same command started twice with the same checkpoint gives a
leader and a hot standby (the failover benchmark). When ``PEER_ROLES`` names a
file, each process appends ``{"pid", "role", "wall"}`` to it once its ``start()``
returned (``leader``, ``standby``, or ``none`` without high availability): a
standby's ``start()`` returns once it stands by warm.

Per completed batch one JSON line goes to ``--out``: batch time, records, scheduling,
processing and total delay (ms), the words the batch counted (the sum of its
word counts, which checks that the records went through the whole job), those of
them that were the word named by ``PEER_FRESH_WORD`` (0 when unset: the failover
benchmark's mark on lines sent after its kill), the wall clock at completion and
the app's process id.
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
from typing import Any

# (words, fresh words) counted per batch time, filled by the output operation, read
# by the listener.
_WORDS: dict[int, tuple[int, int]] = {}
_LOCK = threading.Lock()


def _record(t: Any, rdd: Any) -> None:
    gate = os.environ.get("PEER_GATE", "")
    while gate and os.path.exists(gate):
        time.sleep(0.1)
    fresh_word = os.environ.get("PEER_FRESH_WORD", "")
    if rdd.isEmpty():
        n, fresh = 0, 0
    elif fresh_word:  # one job for both sums, as the plain count is one job
        n, fresh = rdd.map(lambda kv: (kv[1], kv[1] if kv[0] == fresh_word else 0)).reduce(
            lambda a, b: (a[0] + b[0], a[1] + b[1]))
    else:
        n, fresh = rdd.map(lambda kv: kv[1]).sum(), 0
    with _LOCK:
        _WORDS[round(t.timestamp() * 1000)] = (int(n), int(fresh))


def _report_role(ssc: Any) -> None:
    """Append this process's role to the file named by ``PEER_ROLES``, if any."""
    path = os.environ.get("PEER_ROLES", "")
    if not path:
        return
    role = ssc.ha_role  # the benchmark app reports its role, as ha_app does
    with open(path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "role": role, "wall": time.time()}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--impl", choices=["spark", "ours", "ours-nometrics", "ours-ha"],
                    required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--batch-s", type=float, default=1.0)
    ap.add_argument("--master", default="local[3]")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--block-interval-ms", type=int, default=200)
    ap.add_argument("--extra-ports", default="",
                    help="comma-separated ports of more line servers, one receiver each")
    args = ap.parse_args(argv)
    logging.basicConfig(level=os.environ.get("WALSTREAM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark import SparkConf, SparkContext, StorageLevel

    if args.impl == "spark":
        from pyspark.streaming import StreamingContext
        from pyspark.streaming.listener import StreamingListener
    else:
        from walstream.driver import StreamingContext, StreamingListener  # type: ignore[assignment]

    def setup() -> Any:
        conf = (SparkConf().setMaster(args.master).setAppName(f"peer-bench-{args.impl}")
                .set("spark.ui.enabled", "false")
                .set("spark.default.parallelism", "3")
                .set("spark.streaming.receiver.writeAheadLog.enable", "true")
                .set("spark.streaming.blockInterval", f"{args.block_interval_ms}ms")
                .set("spark.streaming.stopGracefullyOnShutdown", "false")
                .set("spark.walstream.metrics.enabled",
                     "false" if args.impl == "ours-nometrics" else "true"))
        if args.impl == "ours-ha":
            conf.set("spark.walstream.ha.enabled", "true")
        sc = SparkContext(conf=conf)
        ssc = StreamingContext(sc, args.batch_s)
        ssc.checkpoint(args.checkpoint)
        ports = [args.port, *(int(p) for p in args.extra_ports.split(",") if p)]
        streams = [ssc.socketTextStream("127.0.0.1", port, StorageLevel.MEMORY_AND_DISK)
                   for port in ports]
        lines = streams[0] if len(streams) == 1 else ssc.union(*streams)
        counts = (lines.flatMap(lambda line: line.split(" "))
                  .map(lambda w: (w, 1))
                  .reduceByKey(lambda a, b: a + b))
        counts.foreachRDD(_record)
        return ssc

    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    logging.getLogger("peer_app").info("context ready")
    ssc.sparkContext.setLogLevel("ERROR")
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 (closed at exit)

    class Recorder(StreamingListener):
        def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
            info = batchCompleted.batchInfo()
            t = int(info.batchTime().milliseconds())
            with _LOCK:
                counted, fresh = _WORDS.pop(t, (0, 0))
            out.write(json.dumps({
                "t": t, "records": int(info.numRecords()),
                "scheduling_ms": int(info.schedulingDelay()),
                "processing_ms": int(info.processingDelay()),
                "total_ms": int(info.totalDelay()), "words": counted,
                "fresh": fresh, "wall": time.time(), "pid": os.getpid()}) + "\n")

    ssc.addStreamingListener(Recorder())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ssc.start()
    logging.getLogger("peer_app").info("context started")
    _report_role(ssc)
    print(f"peer app started on {ssc.sparkContext.master}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    ssc.stop(stopSparkContext=True, stopGraceFully=False)
    out.close()
    os._exit(0)  # py4j's callback server thread can keep a PySpark process alive


if __name__ == "__main__":
    sys.exit(main())
