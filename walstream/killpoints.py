"""Named kill points: crash this process with SIGKILL at an exact step, for chaos tests.

Arm one with ``WALSTREAM_KILL_POINT=<name>`` (or ``<name>:<n>`` to die on the
n-th time the point is reached, default 1). Unarmed, ``kill_point`` costs one
dict lookup. Recovery tests then read like specs: "die after the allocation is
logged, restart, and the replayed state equals the state before the kill".

A running application can also be armed without a restart: start it with
``WALSTREAM_KILL_POINT_FILE=<path>`` (every process it starts inherits the
variable, Spark's Python workers included) and later write ``<name>[:<n>]``
into that file. The n-th crossing of the point after the file appeared, in any
process, kills that process; it removes the file first, so one armed file
fires exactly once across the driver and its workers (the chaos harness uses
this: a point fault costs one restart instead of two).

Names in use (each documented where it is placed; docs/ARCHITECTURE.md lists
which invariant each one tests and the tests that arm it):

* ``wal.between_chunks``                  -- a record above ``chunk_bytes`` torn: its
  first chunks acknowledged by the broker, the rest never produced (the WAL
  flushes them first when armed, see :func:`armed`)
* ``receiver.after_store_before_report``  -- block in the WAL, driver not told
* ``tracker.after_log_before_apply``      -- an event is durable, memory not changed
* ``tracker.after_add_block_before_answer`` -- AddBlock logged and applied, no answer
* ``tracker.after_allocation_logged``     -- a batch allocation is durable
* ``batch.during_output``                 -- inside a batch's output operation
* ``checkpoint.mid_write``                -- half a checkpoint file written
* ``checkpoint.after_write_before_clean`` -- checkpoint durable, WAL not cleaned
* ``ha.after_claim``                      -- a new leader's epoch won in the lease
  log, nothing fenced yet
* ``ha.after_sink_fence``                 -- its Kafka sinks fenced, checkpoints not
* ``ha.after_checkpoint_fence``           -- its checkpoints fenced, driver WAL not cut
* ``ha.after_link``                       -- its driver WAL epoch linked (the cut),
  ``EpochStarted`` not logged
* ``ha.after_epoch_started``              -- ``EpochStarted`` logged, nothing started
* ``ha.before_release``                   -- a leader stopping: its receivers stopped
  and drained, its lease not released yet
* ``structured.after_commit_clean``       -- a Structured query's commit forgot its
  allocations and cleaned the logs below what later micro-batches read
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV = "WALSTREAM_KILL_POINT"
FILE_ENV = "WALSTREAM_KILL_POINT_FILE"
_counts: dict[str, int] = {}
_lock = threading.Lock()
# The armed file's (mtime_ns, content) seen last, and the crossings counted since.
_file_seen: tuple[int, str] | None = None
_file_counts: dict[str, int] = {}


def _parse(raw: str) -> tuple[str, int] | None:
    raw = raw.strip()
    if not raw:
        return None
    name, _, n = raw.partition(":")
    return name, int(n) if n.isdigit() else 1


def _armed() -> tuple[str, int] | None:
    return _parse(os.environ.get(ENV, ""))


def _die(name: str) -> None:
    sys.stderr.write(f"walstream: kill point {name} reached: SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _file_armed(path: str, name: str) -> bool:
    """True when the armed file names ``name`` and this is its n-th crossing."""
    global _file_seen
    try:
        st = os.stat(path)
        if _file_seen is not None and _file_seen[0] == st.st_mtime_ns:
            raw = _file_seen[1]
        else:
            with open(path) as f:
                raw = f.read()
    except OSError:
        return False  # not armed (or disarmed by the process that fired it)
    spec = _parse(raw)
    if spec is None or spec[0] != name:
        return False
    with _lock:
        if _file_seen != (st.st_mtime_ns, raw):  # newly armed: count from here
            _file_seen = (st.st_mtime_ns, raw)
            _file_counts.clear()
        _file_counts[name] = _file_counts.get(name, 0) + 1
        if _file_counts[name] != spec[1]:
            return False
    try:
        os.unlink(path)  # fire once: no other process dies at the same arming
    except FileNotFoundError:
        return False  # another process fired it first
    return True


def armed(name: str) -> bool:
    """True when ``name`` is the point armed by variable or by file (any crossing count).

    For a point that must prepare the crash it simulates (flush what a real
    crash would have left behind) before :func:`kill_point` fires; it never
    counts a crossing. Costs what ``kill_point`` costs: one dict lookup without
    ``WALSTREAM_KILL_POINT_FILE``, one failed open with it while nothing is armed.
    """
    spec = _armed()
    if spec is not None and spec[0] == name:
        return True
    path = os.environ.get(FILE_ENV)
    if not path:
        return False
    try:
        with open(path) as f:
            spec = _parse(f.read())
    except OSError:
        return False
    return spec is not None and spec[0] == name


def kill_point(name: str) -> None:
    """SIGKILL this process if ``name`` is armed and reached for the n-th time."""
    armed = _armed()
    if armed is not None and armed[0] == name:
        with _lock:
            _counts[name] = _counts.get(name, 0) + 1
            fire = _counts[name] == armed[1]
        if fire:
            _die(name)
        return
    path = os.environ.get(FILE_ENV)
    if path and _file_armed(path, name):
        _die(name)


def arm_file(path: str | os.PathLike[str], name: str, n: int = 1) -> None:
    """Arm ``name`` for the processes started with ``WALSTREAM_KILL_POINT_FILE=path``
    (written atomically: a reader never sees half a name)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{name}:{n}")
    os.replace(tmp, path)
