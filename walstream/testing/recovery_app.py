"""A stateful word count that a test (or the chaos suite) kills and restarts.

``python -m walstream.testing.recovery_app CHECKPOINT_DIR OUT_DIR --total N``:
a deterministic generator receiver (exactly-once across restarts) -> words ->
``updateStateByKey`` running totals; every batch writes, keyed by its time (so a
re-run replaces rather than adds), the words it counted and the totals. When
the totals reach the expected number of words it writes ``OUT_DIR/done``.
Started again after a SIGKILL, ``getOrCreate`` recovers it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from walstream.receiver.rate_receiver import generated_line


def expected_counts(seed: int, total: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(total):
        for w in generated_line(seed, i).split():
            counts[w] = counts.get(w, 0) + 1
    return counts


def _write(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, sort_keys=True))
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--total", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--batch", type=float, default=1.0)
    ap.add_argument("--state-checkpoint", type=float, default=2.0)
    ap.add_argument("--window", type=int, default=0,
                    help="also reduceByKeyAndWindow with an inverse over this many "
                         "batches, writing window-<ms>.json (word count in the window)")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=os.environ.get("WALSTREAM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    expected_total = sum(expected_counts(args.seed, args.total).values())

    from pyspark import SparkConf, SparkContext

    from walstream.driver import StreamingContext
    from walstream.driver.spark import spark_environment
    from walstream.receiver.rate_receiver import RateGeneratorReceiver

    def setup() -> StreamingContext:
        spark_environment()
        conf = SparkConf().setMaster(os.environ.get("WALSTREAM_SPARK_MASTER", "local[3]"))
        conf.setAppName("recovery-app").set("spark.ui.enabled", "false")
        sc = SparkContext.getOrCreate(conf)
        sc.setLogLevel("ERROR")
        ssc = StreamingContext(sc, args.batch)
        ssc.checkpoint(args.checkpoint)
        lines = ssc.receiverStream(RateGeneratorReceiver(args.rate, args.seed, args.total))
        words = lines.flatMap(lambda line: line.split())
        out = str(args.out)

        def save_batch(t: Any, rdd: Any) -> None:
            n = rdd.count()
            _write(Path(out) / f"batch-{int(t.timestamp() * 1000)}.json", n)

        words.foreachRDD(save_batch)

        def update(new: list[int], old: int | None) -> int:
            return sum(new) + (old or 0)

        totals = words.map(lambda w: (w, 1)).updateStateByKey(update)
        totals.checkpoint(args.state_checkpoint)  # reliable RDD checkpoints of the state

        def save_totals(t: Any, rdd: Any) -> None:
            state = dict(rdd.collect())
            _write(Path(out) / "totals.json", state)
            if sum(state.values()) >= expected_total:
                (Path(out) / "done").touch()

        totals.foreachRDD(save_totals)
        if args.window:
            windowed = words.map(lambda w: (w, 1)).reduceByKeyAndWindow(
                lambda a, b: a + b, lambda a, b: a - b, args.window * args.batch, args.batch)

            def save_window(t: Any, rdd: Any) -> None:
                n = sum(v for _, v in rdd.collect())
                _write(Path(out) / f"window-{int(t.timestamp() * 1000)}.json", n)

            windowed.foreachRDD(save_window)
        return ssc

    ssc = StreamingContext.getOrCreate(args.checkpoint, setup)
    _write(args.out / "master.json", ssc.sparkContext.master)  # conf recovery: new master
    ssc.start()
    ssc.awaitTermination()


if __name__ == "__main__":
    main()
