"""A fixed pool of daemon threads for the job scheduler's output operations.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter
exits. A driver whose context stopped on an error (a lease lost, a fenced
checkpoint) and whose script then ends while an output operation still waits on
Spark would hang in that join, the job generator of the stopped context still
ticking. Daemon threads end with the process instead, which for an output
operation is the same as a crash at that point: batches are exactly-once under
SIGKILL, so nothing is lost or doubled by it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class DaemonThreadPool:
    """``workers`` daemon threads run submitted calls in submission order.

    The threads start with the first call, as an executor's do (constructing an
    engine starts no thread). :meth:`submit` after :meth:`shutdown` raises
    ``RuntimeError`` (as an executor does). A call that raises is logged; callers
    handle their own errors."""

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one worker, got {workers}")
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]
        self._started = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a call after the pool was shut down")
            if not self._started:
                self._started = True
                for t in self._threads:
                    t.start()
            self._calls.put((fn, args))

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            fn, args = call
            try:
                fn(*args)
            except BaseException:  # a worker must outlive any one call
                log.exception("a pooled call failed")

    def shutdown(self, wait: bool = True, cancel_pending: bool = False,
                 timeout_s: float | None = None) -> None:
        """Take no more calls; drop the queued ones with ``cancel_pending``; with
        ``wait``, join the workers (each at most ``timeout_s``, default unbounded)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if cancel_pending:
                    try:
                        while True:
                            self._calls.get_nowait()
                    except queue.Empty:
                        pass
                for _ in self._threads:
                    self._calls.put(None)
        if wait and self._started:
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(timeout_s)
