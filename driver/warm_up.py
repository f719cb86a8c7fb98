"""Starting PySpark's Python workers before the first batch needs them.

A fresh (or restarted) driver's first batch otherwise pays for the whole cold
start of task execution: the worker daemon forks its workers, each imports
confluent-kafka, fastavro and this project's block reader. After a SIGKILL
that cost lands on the first recovered batch, while the driver also replays
its WAL and regenerates the pending batches. A job with one task per task slot
(receivers included: a standby that takes over starts them all at once), each
holding its worker a moment so that they overlap, started on a background thread
when the context starts, overlaps that work with the WAL replay. It reads and
writes nothing, so it cannot affect any result; when it fails (the context
stopped at once, say) only a debug line is logged.
Turned off with ``spark.walstream.warmUpWorkers=false``.

A hot standby (driver/ha/high_availability.py) keeps them warm while it stands by: Spark ends a
Python worker left idle for a minute, and a standby runs no batch. So every
``KEEP_WARM_PERIOD_S`` it runs the same job with a shuffle after it, the shape of
a batch's word count, which also keeps the JVM's shuffle path compiled.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

CONF_WARM_UP = "spark.walstream.warmUpWorkers"
#: Below Spark's one-minute end of idle Python workers.
KEEP_WARM_PERIOD_S = 20.0


#: How long each warm-up task holds its worker, so that the job's tasks overlap
#: and every task slot gets a worker of its own (quick tasks would reuse a few).
HOLD_S = 0.3


def _import_block_reader(_: Iterable[Any]) -> Iterator[int]:
    # Runs in a Python worker: the imports a block-reading task needs.
    import time

    import confluent_kafka  # noqa: F401
    import fastavro  # noqa: F401

    from walstream.receiver.block import Block  # noqa: F401
    from walstream.receiver.items import decode_item  # noqa: F401
    from walstream.wal.reader import WalReader  # noqa: F401

    time.sleep(HOLD_S)
    yield 1


def task_slots(sc: Any) -> int:
    """Tasks the application can run at once: ``N`` of a ``local[N]`` master (the
    receivers and the batches share them), else Spark's default parallelism."""
    master = str(getattr(sc, "master", "") or "")
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if m:
        return os.cpu_count() or 1 if m.group(1) == "*" else int(m.group(1))
    if master == "local":
        return 1
    return max(1, int(sc.defaultParallelism))


def warm_up_workers(sc: Any, conf: dict[str, str]) -> threading.Thread | None:
    """Run the warm-up job on a daemon thread (None when turned off)."""
    if conf.get(CONF_WARM_UP, "true").strip().lower() == "false":
        return None

    def run() -> None:
        try:
            n = task_slots(sc)
            sc.parallelize(range(n), n).mapPartitions(_import_block_reader).count()
        except Exception as exc:  # the context may be stopping: nothing depends on this
            log.debug("worker warm-up job did not finish: %s", exc)

    thread = threading.Thread(target=run, name="walstream-warm-up", daemon=True)
    thread.start()
    return thread


def _warm_job(sc: Any) -> None:
    n = task_slots(sc)
    (sc.parallelize(range(n), n).mapPartitions(_import_block_reader)
     .map(lambda i: (i, 1)).reduceByKey(lambda a, b: a + b, n).count())


def keep_warm(sc: Any, conf: dict[str, str], stop: threading.Event,
              period_s: float | None = None) -> threading.Thread | None:
    """Until ``stop`` is set, run a warm-up job with a shuffle every ``period_s``
    (default :data:`KEEP_WARM_PERIOD_S`) on a daemon thread; None when warm-ups are
    turned off. A job that fails is logged at debug level and tried again later."""
    if conf.get(CONF_WARM_UP, "true").strip().lower() == "false":
        return None
    period = KEEP_WARM_PERIOD_S if period_s is None else period_s

    def run() -> None:
        while not stop.wait(period):
            try:
                _warm_job(sc)
            except Exception as exc:  # stopping, or a lost executor: only less warm
                log.debug("keep-warm job did not finish: %s", exc)

    thread = threading.Thread(target=run, name="walstream-keep-warm", daemon=True)
    thread.start()
    return thread
