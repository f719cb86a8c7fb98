"""RecurringTimer: calls back on every multiple of a period (Spark's RecurringTimer)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class RecurringTimer:
    """Calls ``callback(t_ms)`` for t = start, start + period, ... on one thread.

    Times are on the wall clock's period boundaries, so batch times are the
    same in every process (a restarted driver lands on the same grid). A late
    tick is not skipped: each period gets its callback, in order.
    """

    def __init__(self, period_ms: int, callback: Callable[[int], None], name: str = "timer",
                 clock: Callable[[], float] = time.time) -> None:
        self.period_ms = period_ms
        self.callback = callback
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.next_time_ms = 0

    def start(self, start_ms: int | None = None) -> int:
        now_ms = int(self.clock() * 1000)
        first = (now_ms // self.period_ms + 1) * self.period_ms if start_ms is None else start_ms
        self.next_time_ms = first
        self._thread.start()
        return first

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = self.next_time_ms / 1000 - self.clock()
            if wait > 0:
                if self._stop.wait(min(wait, 0.5)):
                    return
                continue
            t = self.next_time_ms
            self.next_time_ms += self.period_ms
            try:
                self.callback(t)
            except Exception:
                log.exception("timer callback for %d failed", t)

    def stop(self) -> int:
        """Stop; returns the next time that would have fired."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        return self.next_time_ms
