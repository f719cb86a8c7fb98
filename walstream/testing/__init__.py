"""walstream's test kit: what an application's own tests can use without a broker.

Public (this package's names, kept stable):

* :class:`MemoryWAL` -- an in-memory :class:`~walstream.wal.base.WriteAheadLog` with fault
  injection (fail the next N writes with an error of your choice, hold writes at a
  gate) and counters; :class:`AsyncMemoryWAL` adds ``write_async``.
* :func:`wait_until` -- a bounded poll that fails with a message
  (:class:`WaitTimeoutError`, both an ``AssertionError`` and a ``TimeoutError``).

Internal (the project's own test and chaos harness; may change without notice):
``fixtures`` (the pytest plugin the repository's root ``conftest.py`` loads: broker,
Spark and naming fixtures), ``chaos``, ``chaos_app``, ``chaos_config``,
``chaos_feeder``, ``chaos_process``, ``crash_driver``, ``recovery_app``,
``standalone``, ``wal_writer``, and the multi-host ones: ``netns`` (hosts as network
namespaces), ``multihost_cluster`` (broker, Spark master, workers and a driver host
on them) and ``multihost_app`` (the word count submitted there, and its tools).
"""

from __future__ import annotations

from walstream.testing.memory_wal import AsyncMemoryWAL, MemoryWAL
from walstream.testing.waiting import WAIT_S, WaitTimeoutError, wait_until

__all__ = ["WAIT_S", "AsyncMemoryWAL", "MemoryWAL", "WaitTimeoutError", "wait_until"]
