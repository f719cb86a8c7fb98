"""CommandMailbox: the driver's pending commands for one receiver, coalesced.

The driver sends a receiver three kinds of command over its Control stream:
StopReceiver, CleanupOldBlocks and UpdateRateLimit. Each supersedes the earlier
ones of its kind (a later rate replaces an earlier one, a higher cleanup
threshold covers a lower one, one STOP is as good as many), so the mailbox keeps
at most one of each: it can never overflow, and no command is ever dropped.
"""

from __future__ import annotations

import threading
from typing import Any


class CommandMailbox:
    """Holds at most one pending STOP, the latest rate limit and the highest cleanup
    threshold; :meth:`take` hands them out in that order of kinds: cleanup, rate,
    then STOP (last, since a receiver ends its Control stream on STOP).

    Thread-safe. A command taken is gone: a receiver launched later does not see it
    (it gets the current rate limit when it registers).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stop: str | None = None
        self._rate: float | None = None
        self._cleanup: int | None = None
        # The highest cleanup threshold ever asked through this mailbox: the receiver
        # is granted deletes below it only (driver/receiver_tracker/endpoint.py, may_clean).
        self.cleanup_asked = 0
        self._stream = 0  # which Control stream follows this mailbox (the latest opened)

    def stop(self, message: str) -> None:
        """Ask the receiver to stop; an earlier pending STOP is replaced (latest reason)."""
        with self._cond:
            self._stop = message
            self._cond.notify_all()

    def update_rate(self, rate: float) -> None:
        with self._cond:
            self._rate = rate
            self._cond.notify_all()

    def cleanup(self, thresh_time_ms: int) -> None:
        with self._cond:
            if self._cleanup is None or thresh_time_ms > self._cleanup:
                self._cleanup = thresh_time_ms
            self.cleanup_asked = max(self.cleanup_asked, thresh_time_ms)
            self._cond.notify_all()

    def pending(self) -> int:
        """How many commands wait (at most 3)."""
        with self._cond:
            return self._count()

    def _count(self) -> int:  # the caller holds the lock
        return sum(x is not None for x in (self._stop, self._rate, self._cleanup))

    def open_stream(self) -> int:
        """A new Control stream follows this mailbox: the token to :meth:`take` with.
        The stream it supersedes is woken and gets ``None`` from then on, so one
        receiver holds at most one server thread for its commands."""
        with self._cond:
            self._stream += 1
            self._cond.notify_all()
            return self._stream

    def is_current(self, stream: int) -> bool:
        with self._cond:
            return stream == self._stream

    def take(self, timeout_s: float, stream: int | None = None) -> dict[str, Any] | None:
        """The next command as a ``COMMAND`` body, waiting up to ``timeout_s``; None
        when none came, or at once when ``stream`` (from :meth:`open_stream`) was
        superseded."""
        with self._cond:
            def ready() -> bool:
                return self._count() > 0 or (stream is not None and stream != self._stream)

            self._cond.wait_for(ready, timeout_s)
            if stream is not None and stream != self._stream:
                return None
            if self._cleanup is not None:
                thresh, self._cleanup = self._cleanup, None
                return {"kind": "CLEANUP_OLD_BLOCKS", "thresh_time_ms": thresh}
            if self._rate is not None:
                rate, self._rate = self._rate, None
                return {"kind": "UPDATE_RATE_LIMIT", "rate_limit": rate}
            if self._stop is not None:
                message, self._stop = self._stop, None
                return {"kind": "STOP", "message": message}
            return None
