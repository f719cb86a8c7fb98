"""Starting PySpark's Python workers before the first batch needs them.

A fresh (or restarted) driver's first batch otherwise pays for the whole cold
start of task execution: the worker daemon forks its workers, each imports
confluent-kafka, fastavro and this project's block reader. After a SIGKILL
that cost lands on the first recovered batch, while the driver also replays
its WAL and regenerates the pending batches. A one-task-per-core job started
on a background thread when the context starts overlaps that work with the
WAL replay. It reads and writes nothing, so it cannot affect any result; when
it fails (the context stopped at once, say) only a debug line is logged.
Turned off with ``spark.walstream.warmUpWorkers=false``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

CONF_WARM_UP = "spark.walstream.warmUpWorkers"


def _import_block_reader(_: Iterable[Any]) -> Iterator[int]:
    # Runs in a Python worker: the imports a block-reading task needs.
    import confluent_kafka  # noqa: F401
    import fastavro  # noqa: F401

    from receiver.block import Block  # noqa: F401
    from receiver.items import decode_item  # noqa: F401
    from wal.reader import WalReader  # noqa: F401

    yield 1


def warm_up_workers(sc: Any, conf: dict[str, str]) -> threading.Thread | None:
    """Run the warm-up job on a daemon thread (None when turned off)."""
    if conf.get(CONF_WARM_UP, "true").strip().lower() == "false":
        return None

    def run() -> None:
        try:
            n = max(1, int(sc.defaultParallelism))
            sc.parallelize(range(n), n).mapPartitions(_import_block_reader).count()
        except Exception as exc:  # the context may be stopping: nothing depends on this
            log.debug("worker warm-up job did not finish: %s", exc)

    thread = threading.Thread(target=run, name="walstream-warm-up", daemon=True)
    thread.start()
    return thread
