"""What a user's own output operations write, per batch time, for the checkers that
count lost, doubled and split-brain output (no Kafka fence protects these writes).

:func:`add_per_batch_outputs` adds two ``foreachRDD`` outputs to an app:

* each batch's running totals to ``OUT/by-time/<batch ms>.json`` (the last write
  wins, as a file, a database row or an object store key would) and to
  ``<batch ms>.<pid>.json`` (what this process wrote);
* each batch's word counts appended as a JSON line to ``OUT/counts.jsonl`` with the
  batch time and the pid.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from walstream.testing.recovery_app import _write


def add_per_batch_outputs(totals: Any, pairs: Any, out: str) -> None:
    """``totals``: a DStream of ``(word, running total)``; ``pairs``: of ``(word, 1)``."""
    def totals_by_time(t: Any, rdd: Any) -> None:
        state = dict(rdd.collect())
        ms, by_time = round(t.timestamp() * 1000), Path(out) / "by-time"
        by_time.mkdir(exist_ok=True)
        _write(by_time / f"{ms}.json", state)
        _write(by_time / f"{ms}.{os.getpid()}.json", state)

    def append_counts(t: Any, rdd: Any) -> None:
        line = json.dumps({"t": round(t.timestamp() * 1000), "pid": os.getpid(),
                           "counts": dict(rdd.collect())}, sort_keys=True)
        with open(Path(out) / "counts.jsonl", "a") as f:
            f.write(line + "\n")

    totals.foreachRDD(totals_by_time)
    pairs.reduceByKey(lambda a, b: a + b, 1).foreachRDD(append_counts)
