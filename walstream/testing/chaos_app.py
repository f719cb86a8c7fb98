"""The application the chaos harness kills: Kafka -> word count -> exactly-once outputs.

``python -m walstream.testing.chaos_app CKPT OUT --source TOPIC --sink TOPIC --mode
receiver|direct --expected N``: ``KafkaUtils.createStream`` (receiver, through the
WAL) or ``createDirectStream`` over the source topic; values are versioned lines
(``v1|<words>``), decoded by :func:`decode_value`, which rejects undecodable bytes,
unknown versions and oversize values (the pipeline skips, counts and reports
them). Outputs, all keyed by batch time so re-runs replace:

* per-batch word counts to the ``--sink`` topic through :class:`driver.KafkaSink`
  and to ``OUT/counts/batch-<ms>`` through ``saveAsTextFiles``;
* running totals (``updateStateByKey``, checkpointed) to ``OUT/totals.json``,
  and ``OUT/done`` once they reach ``--expected`` words;
* ``OUT/progress.jsonl``: wall time of every completed batch (recovery times);
* ``OUT/receivers.jsonl`` / ``OUT/errors.jsonl``: receiver starts (executor ids
  with worker pids, for receiver kills) and reported errors (bad records);
* ``OUT/undecodable-<pid>.json``: the direct stream's count of skipped records.

Restarted after a SIGKILL it recovers with ``StreamingContext.getOrCreate``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from walstream.errors import UnknownSchemaVersionError
from walstream.testing.recovery_app import _write

MAX_VALUE_BYTES = 64 * 1024


def decode_value(data: bytes | None) -> str:
    """``v1|<utf-8 text>``; anything else raises (skipped and reported)."""
    if data is None:
        raise ValueError("a record with no value")
    if len(data) > MAX_VALUE_BYTES:
        raise ValueError(f"value of {len(data)} bytes exceeds {MAX_VALUE_BYTES}")
    version, sep, body = data.partition(b"|")
    if not sep or not version.startswith(b"v"):
        raise ValueError(f"not a versioned record: {data[:20]!r}")
    if version != b"v1":
        raise UnknownSchemaVersionError("chaos line", int(version[1:] or b"0"), (1,))
    return body.decode("utf-8")


def _append(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:  # one short line per write: atomic enough for O_APPEND
        f.write(json.dumps(record, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--mode", choices=("receiver", "direct"), default="receiver")
    ap.add_argument("--expected", type=int, required=True, help="words in the good records")
    ap.add_argument("--batch", type=float, default=2.0)
    args = ap.parse_args()
    out: Path = args.out
    (out / "counts").mkdir(parents=True, exist_ok=True)

    from pyspark import SparkConf, SparkContext

    from walstream.driver import KafkaSink, KafkaUtils, StreamingContext
    from walstream.driver.spark import spark_environment

    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    outd = str(out)

    def setup() -> StreamingContext:
        spark_environment()
        conf = SparkConf().setMaster(os.environ.get("WALSTREAM_SPARK_MASTER", "local[3]"))
        conf.setAppName(f"chaos-{args.mode}").set("spark.ui.enabled", "false")
        conf.set("spark.ui.showConsoleProgress", "false")
        sc = SparkContext.getOrCreate(conf)
        sc.setLogLevel("ERROR")
        ssc = StreamingContext(sc, args.batch)
        ssc.checkpoint(args.checkpoint)
        if args.mode == "receiver":
            pairs = KafkaUtils.createStream(ssc, bootstrap, "chaos", {args.source: 1},
                                            valueDecoder=decode_value)
        else:
            pairs = KafkaUtils.createDirectStream(
                ssc, [args.source], {"bootstrap.servers": bootstrap,
                                     "auto.offset.reset": "smallest"},
                valueDecoder=decode_value)
            direct = pairs

            def save_undecodable(rdd: Any) -> None:
                _write(Path(outd) / f"undecodable-{os.getpid()}.json", direct.undecodable)

            pairs.foreachRDD(save_undecodable)
        words = pairs.flatMap(lambda kv: kv[1].split())
        # One partition: a small word count; one KafkaSink producer per batch.
        counts = words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 1)
        counts.foreachRDD(KafkaSink(bootstrap, args.sink,
                                    value=lambda kv: f"{kv[0]}\t{kv[1]}"))
        counts.map(lambda kv: f"{kv[0]}\t{kv[1]}").saveAsTextFiles(
            os.path.join(outd, "counts", "batch"))

        def update(new: list[int], old: int | None) -> int:
            return sum(new) + (old or 0)

        totals = words.map(lambda w: (w, 1)).updateStateByKey(update, 1)
        totals.checkpoint(2 * args.batch)

        def save_totals(t: Any, rdd: Any) -> None:
            state = dict(rdd.collect())
            _write(Path(outd) / "totals.json", state)
            if sum(state.values()) >= args.expected:
                (Path(outd) / "done").touch()

        totals.foreachRDD(save_totals)
        return ssc

    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    ssc.addStreamingListener(progress_recorder(out))
    ssc.start()
    ssc.awaitTermination()


def progress_recorder(out: Path) -> Any:
    """A listener writing an app's progress as JSON lines under ``out``, for the
    harness that watches it from another process: ``started.jsonl`` (each start),
    ``progress.jsonl`` (each completed batch: time, records per stream; a batch with a
    failed output operation goes to ``failed.jsonl`` instead),
    ``receivers.jsonl`` (where each receiver started) and ``errors.jsonl``."""
    from walstream.driver import StreamingListener

    class Recorder(StreamingListener):
        def onStreamingStarted(self, streamingStarted: Any) -> None:  # noqa: N803
            _append(out / "started.jsonl", {"pid": os.getpid(), "wall": time.time()})

        def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
            info = batchCompleted.batchInfo()
            failed = sorted(op.name() for op in info.outputOperationInfos().values()
                            if op.failureReason())
            if failed:  # a batch with a failed output is done, not completed
                _append(out / "failed.jsonl", {
                    "pid": os.getpid(), "wall": time.time(),
                    "batch": info.batchTime().milliseconds(), "outputs": failed})
                return
            _append(out / "progress.jsonl", {
                "pid": os.getpid(), "wall": time.time(),
                "batch": info.batchTime().milliseconds(),
                "records": {str(s): i.numRecords()
                            for s, i in info.streamIdToInputInfo().items()}})

        def onReceiverStarted(self, receiverStarted: Any) -> None:  # noqa: N803
            info = receiverStarted.receiverInfo()
            _append(out / "receivers.jsonl", {"stream": info.stream_id, "wall": time.time(),
                                               "executor": info.executor_id})

        def onReceiverError(self, receiverError: Any) -> None:  # noqa: N803
            info = receiverError.receiverInfo()
            _append(out / "errors.jsonl", {"stream": info.stream_id,
                                            "message": info.last_error_message})

    return Recorder()


if __name__ == "__main__":
    main()
