"""Unix domain sockets between Spark's JVM and its Python workers, unless the app chose.

Why: PySpark talks to each Python worker over a loopback TCP socket by default.
The JVM writes a task's command and input in several small writes, and with
Nagle's algorithm on the JVM's side and delayed acknowledgements on the worker's,
the last write of a small task waits for the worker's delayed ACK (about 40 ms
on Linux) before it leaves. Every Python task of a batch pays that, and a
streaming batch is a few small jobs of a few small tasks each, every interval:
it is a fixed part of each batch's processing time, not of its CPU. Over a Unix
domain socket (``spark.python.unix.domain.socket.enabled``, Spark 4.1 and later)
there is no such wait. The measurements are in
docs/decisions/python-worker-unix-sockets.md.

What is set, and when:

- ``spark.python.unix.domain.socket.enabled=true`` is a default, never an
  override: a value the app set in its SparkConf, or ``$PYSPARK_UDS_MODE`` (which
  is Spark's own default for the key), stands.
- A context walstream builds (:func:`walstream.driver.spark.create_spark_context`, a
  restore by ``getOrCreate``) has it in its SparkConf from the start, so a
  cluster's executors get it when they register.
- A SparkContext the app built itself gets it in its running conf when a
  :class:`driver.StreamingContext` is made on it (:func:`prefer_unix_sockets`).
  Spark reads the key when it starts an executor's first Python worker pool, so
  it takes effect where no Python task has run yet (a local master's executor
  before the app's first Python job; executors that register later). Where a
  pool already runs, it keeps TCP; both work alike, only the wait differs.

- Where the key ends up ``true``, ``spark.python.daemon.module`` defaults to
  :mod:`walstream.worker_daemon` (again never over the app's own choice), so
  that a worker whose socket the JVM already closed (every ``sc.stop()`` closes
  its idle workers' sockets) ends quietly instead of printing the
  ``BrokenPipeError`` traceback that a Unix socket makes likely.

Durability: none involved; the setting changes how bytes travel between a JVM
and its own Python workers on one host, not what they are.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from typing import Any

from walstream.worker_daemon import CONF_KEY as DAEMON_KEY
from walstream.worker_daemon import MODULE as DAEMON_MODULE

UDS_KEY = "spark.python.unix.domain.socket.enabled"
#: Spark's own default for :data:`UDS_KEY` (``true`` or ``false``).
UDS_ENV = "PYSPARK_UDS_MODE"


def _app_chose(contains: bool) -> bool:
    return contains or bool(os.environ.get(UDS_ENV, "").strip())


def _is_true(value: str | None) -> bool:
    """Whether the UDS key's value (``None``: unset, so Spark's default) means on."""
    if value is None:
        value = os.environ.get(UDS_ENV, "")
    return value.strip().lower() == "true"


def unix_sockets_default(conf: MutableMapping[str, str]) -> None:
    """Set :data:`UDS_KEY` to ``true`` in ``conf`` (a SparkConf's settings before its
    context starts) unless the app chose, or the platform has no Unix sockets; where
    the key is then ``true``, :data:`DAEMON_KEY` defaults to :mod:`walstream.worker_daemon`."""
    if hasattr(socket, "AF_UNIX") and not _app_chose(UDS_KEY in conf):
        conf[UDS_KEY] = "true"
    if _is_true(conf.get(UDS_KEY)) and DAEMON_KEY not in conf:
        conf[DAEMON_KEY] = DAEMON_MODULE


def prefer_unix_sockets(sc: Any) -> bool:
    """Set :data:`UDS_KEY` to ``true`` in ``sc``'s running conf unless the app chose
    (and :data:`DAEMON_KEY` as :func:`unix_sockets_default` does), and say whether
    the key is ``true`` now (see the module's text for where it
    takes effect). A context with no JVM behind it (a test double) has no conf to
    set: False."""
    jsc = getattr(sc, "_jsc", None)
    if jsc is None:
        return False
    jconf = jsc.sc().conf()
    if hasattr(socket, "AF_UNIX") and not _app_chose(bool(jconf.contains(UDS_KEY))):
        jconf.set(UDS_KEY, "true")
    on = _is_true(str(jconf.get(UDS_KEY)) if jconf.contains(UDS_KEY) else None)
    if on and not jconf.contains(DAEMON_KEY):
        jconf.set(DAEMON_KEY, DAEMON_MODULE)
    return on
