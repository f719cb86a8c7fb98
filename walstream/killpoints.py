"""Named kill points: crash this process with SIGKILL at an exact step, for chaos tests.

Arm one with ``WALSTREAM_KILL_POINT=<name>`` (or ``<name>:<n>`` to die on the
n-th time the point is reached, default 1). Unarmed, ``kill_point`` costs one
dict lookup. Recovery tests then read like specs: "die after the allocation is
logged, restart, and the replayed state equals the state before the kill".

Names in use (each documented where it is placed):

* ``receiver.after_store_before_report``  -- block in the WAL, driver not told
* ``tracker.after_log_before_apply``      -- an event is durable, memory not changed
* ``tracker.after_add_block_before_answer`` -- AddBlock logged and applied, no answer
* ``tracker.after_allocation_logged``     -- a batch allocation is durable
* ``batch.during_output``                 -- inside a batch's output operation
* ``checkpoint.mid_write``                -- half a checkpoint file written
* ``checkpoint.after_write_before_clean`` -- checkpoint durable, WAL not cleaned
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV = "WALSTREAM_KILL_POINT"
_counts: dict[str, int] = {}
_lock = threading.Lock()


def _armed() -> tuple[str, int] | None:
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    name, _, n = raw.partition(":")
    return name, int(n) if n.isdigit() else 1


def kill_point(name: str) -> None:
    """SIGKILL this process if ``name`` is armed and reached for the n-th time."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        if _counts[name] != armed[1]:
            return
    sys.stderr.write(f"walstream: kill point {name} reached: SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
