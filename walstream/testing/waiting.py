"""The test kit's one bounded wait: poll a condition, fail with a message on timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_S = 5.0  # the default bound of a wait: a bug fails a test, never hangs it


class WaitTimeoutError(AssertionError, TimeoutError):
    """:func:`wait_until` gave up. An ``AssertionError`` (a test failure to pytest)
    and a ``TimeoutError`` (for code that waits outside a test)."""


def wait_until(cond: Callable[[], object], timeout_s: float = WAIT_S, what: str = "", *,
               poll_s: float | None = None, ssc: Any = None,
               details: Callable[[], str] | None = None) -> None:
    """Poll ``cond`` until it is true; raise :class:`WaitTimeoutError` after ``timeout_s``.

    The error reads ``timed out after {timeout_s}s waiting for {what}`` (``what``
    defaults to ``cond``'s repr), followed by ``details()`` when given (a log's
    tail, say). ``poll_s`` is the pause between polls: 5 ms, or 50 ms with ``ssc``.
    ``ssc``, a started StreamingContext, is waited on between polls
    (``awaitTerminationOrTimeout``), so a failed batch's error is raised at once
    instead of after the timeout. Returns ``None``.
    """
    pause = poll_s if poll_s is not None else (0.05 if ssc is not None else 0.005)
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            message = f"timed out after {timeout_s:g}s waiting for {what or cond}"
            if details is not None:
                message += "\n" + details()
            raise WaitTimeoutError(message)
        if ssc is not None:
            ssc.awaitTerminationOrTimeout(pause)
        else:
            time.sleep(pause)
