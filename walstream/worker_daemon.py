"""PySpark's Python worker daemon, with the worker-side modules imported before it
forks, and quiet about workers whose socket the JVM already closed.

Why: PySpark starts one daemon per executor and forks a worker from it for every
Python task slot; each forked worker then imports ``pyspark.worker`` and, on its
first task here, this project's modules (``walstream.driver.dstream.block_rdd`` for a batch's
blocks, ``walstream.receiver.task`` for a receiver, with gRPC, confluent-kafka and fastavro).
A restarted driver starts a new executor, so every one of its workers pays that at
once, on the way to the first batch. Imported once in the daemon, the modules reach
each fork already loaded (copy on write). The evidence for it is in
docs/decisions/preloading-worker-daemon.md.

PySpark imports the worker module only after the fork because some libraries
(pandas, pyarrow) start threads when imported, and a process must not fork while
other threads run. So this daemon preloads only modules that start no thread
(``PRELOAD``; ``tests/walstream/test_worker_daemon.py`` checks it in a fresh
process), and hands over to PySpark's own daemon loop unchanged.

The daemon also ends a worker whose socket the JVM already closed with a non-zero
code rather than a traceback (:func:`quiet_on_closed_socket`). Since Spark 4.1 a
worker whose last flush fails raises out of PySpark's loop, which prints the
error to the executor's stderr. The JVM closes worker sockets on purpose: when it
stops its worker pool (every ``SparkContext.stop()``) and when it drops an idle
worker. Such a worker wakes on the closed socket, writes an EOF error for a
reader that is gone, and its flush meets EPIPE. Over a Unix domain socket
(``driver/python_sockets.py``) that happens on the first write, where TCP still
accepts one, so a plain ``sc.stop()`` printed a ``BrokenPipeError`` traceback now
and then: noise that reads like a crash. Nothing is lost by ending quietly: the
reader is gone, the JVM settled that worker's fate before it closed the socket,
and a non-zero code makes the daemon retire the worker rather than reuse it.
PySpark's own diagnostics for a failed flush (a thread dump under
``PYTHON_FAULTHANDLER_DIR``) are written before the error reaches this module;
every other error takes PySpark's path unchanged.

A context restored by ``StreamingContext.getOrCreate`` (``walstream.driver.dstream.recovery``)
and one made by ``walstream.driver.spark.create_spark_context`` set ``spark.python.daemon.module``
to this module unless the application set that key itself (``pyspark.daemon``
turns both off). A SparkContext the application builds itself gets it with the
Unix sockets, when a StreamingContext is made on it (``driver/python_sockets.py``).

Durability: none involved; nothing is read or written before PySpark's loop.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

MODULE = "walstream.worker_daemon"
CONF_KEY = "spark.python.daemon.module"

# What a worker of this project unpickles or imports on its first task.
PRELOAD = (
    "pyspark.worker",
    "walstream.driver.dstream.block_rdd",
    "walstream.driver.dstream.direct_stream",
    "walstream.driver.dstream.receiver_input_stream",
    "walstream.driver.sink.kafka_sink",
    "walstream.receiver.task",
    "walstream.receiver.supervisor",
    "walstream.receiver.driver_client",
    "walstream.wal.kafka_log",
    "walstream.wal.reader",
)


def preload() -> None:
    """Import ``PRELOAD``; one that fails to import is left to the worker, which
    then raises the same error in its task, where Spark reports it."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def quiet_on_closed_socket(worker: Callable[[Any, bool], int]) -> Callable[[Any, bool], int]:
    """``worker`` (PySpark's ``daemon.worker``), returning 1 instead of raising when
    the JVM's end of the worker's socket is closed."""

    def run(sock: Any, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


def main() -> None:
    preload()
    from pyspark import daemon

    # PySpark's loop looks ``worker`` up in its module on every fork.
    daemon.worker = quiet_on_closed_socket(daemon.worker)  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
