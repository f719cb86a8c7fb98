"""PySpark's Python worker daemon, with the worker-side modules imported before it forks.

Why: PySpark starts one daemon per executor and forks a worker from it for every
Python task slot; each forked worker then imports ``pyspark.worker`` and, on its
first task here, this project's modules (``driver.block_rdd`` for a batch's
blocks, ``receiver.task`` for a receiver, with gRPC, confluent-kafka and fastavro).
A restarted driver starts a new executor, so every one of its workers pays that at
once, on the way to the first batch. Imported once in the daemon, the modules reach
each fork already loaded (copy on write). The evidence for it is in
docs/decisions/preloading-worker-daemon.md.

PySpark imports the worker module only after the fork because some libraries
(pandas, pyarrow) start threads when imported, and a process must not fork while
other threads run. So this daemon preloads only modules that start no thread
(``PRELOAD``; ``tests/walstream/test_worker_daemon.py`` checks it in a fresh
process), and hands over to PySpark's own daemon loop unchanged.

A context restored by ``StreamingContext.getOrCreate`` (``driver.recovery``)
and one made by ``driver.spark.create_spark_context`` set ``spark.python.daemon.module``
to this module unless the application set that key itself (``pyspark.daemon``
turns the preloading off). A SparkContext the application builds itself keeps
PySpark's daemon until its first restart from the checkpoint.

Durability: none involved; nothing is read or written before PySpark's loop.
"""

from __future__ import annotations

import contextlib
import importlib

MODULE = "walstream.worker_daemon"
CONF_KEY = "spark.python.daemon.module"

# What a worker of this project unpickles or imports on its first task.
PRELOAD = (
    "pyspark.worker",
    "driver.block_rdd",
    "driver.direct_stream",
    "driver.input_streams",
    "driver.kafka_sink",
    "receiver.task",
    "receiver.supervisor",
    "receiver.driver_client",
    "wal.kafka_log",
    "wal.reader",
)


def preload() -> None:
    """Import ``PRELOAD``; one that fails to import is left to the worker, which
    then raises the same error in its task, where Spark reports it."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def main() -> None:
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
