"""Shared by the driver's unit tests: a bounded poll and the batch interval they use."""

from __future__ import annotations

import time
from collections.abc import Callable

INTERVAL = 100  # ms: the batch interval (and timer period) of these tests
WAIT_S = 5.0  # bound on every wait_until unless a test passes its own


def wait_until(cond: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    """Poll ``cond`` every 5 ms; True once it holds, False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
