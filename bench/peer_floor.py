"""The floor of the peer benchmark: its word count as a plain PySpark batch job over
lines already in memory, on the same Spark settings as the streaming apps.

Run by ``bench.peer_bench`` as a subprocess (its own JVM, like each app)::

    python -m bench.peer_floor --words-per-line 12 --lines 400000 --repeats 5 --out F.json

The job is the streaming apps' per-batch work with the receiving, the logs and the
scheduling of batches taken away (and, as walstream's own contexts, with Python
workers over Unix domain sockets): ``sc.parallelize(lines, 6)`` of lines held by the
driver, then ``flatMap(split)`` -> ``map((w, 1))`` -> ``reduceByKey`` (3 partitions,
``spark.default.parallelism``), then the apps' output operation (``isEmpty`` and the
sum of the counts). It runs ``--warmups`` times unmeasured (JVM, Python workers and
their imports warm), then ``--repeats`` times timed; each repeat checks that it
counted ``words_per_line`` words per line. The lines are the line server's own
(``bench.peer_apps.lines_pool``), cycled to ``--lines``.

Writes ``{"lines": N, "line_bytes": B, "seconds": [...], "lines_per_s": [...]}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

from bench.peer_apps import WORDS_PER_LINE, lines_pool


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--words-per-line", type=int, default=WORDS_PER_LINE)
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmups", type=int, default=2)
    ap.add_argument("--master", default="local[3]")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    from pyspark import SparkConf, SparkContext

    pool = [b.decode().rstrip("\n") for b in lines_pool(args.words_per_line)]
    lines = list(itertools.islice(itertools.cycle(pool), args.lines))
    conf = (SparkConf().setMaster(args.master).setAppName("peer-bench-floor")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.default.parallelism", "3")
            # As walstream's contexts (driver/python_sockets.py): the floor is the
            # machine's best, so it does not pay a wait walstream does not pay.
            .set("spark.python.unix.domain.socket.enabled", "true"))
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    try:
        seconds: list[float] = []
        for i in range(args.warmups + args.repeats):
            started = time.perf_counter()
            counts = (sc.parallelize(lines, 6)
                      .flatMap(lambda line: line.split(" "))
                      .map(lambda w: (w, 1))
                      .reduceByKey(lambda a, b: a + b))
            words = counts.map(lambda kv: kv[1]).sum() if not counts.isEmpty() else 0
            took = time.perf_counter() - started
            if words != args.words_per_line * len(lines):
                raise SystemExit(f"the floor job counted {words} words, not "
                                 f"{args.words_per_line * len(lines)}")
            if i >= args.warmups:
                seconds.append(took)
        args.out.write_text(json.dumps({
            "lines": len(lines), "line_bytes": len(pool[0]) + 1, "seconds": seconds,
            "lines_per_s": [len(lines) / s for s in seconds]}))
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # py4j's callback server thread can keep a PySpark process alive
