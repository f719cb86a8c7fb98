"""The test kit's one bounded wait: poll a condition, fail with a message on timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_S = 5.0  # the default bound of a wait: a bug fails a test, never hangs it


class WaitTimeoutError(AssertionError, TimeoutError):
    """:func:`wait_until` gave up: it timed out, saw no progress, or was aborted.
    An ``AssertionError`` (a test failure to pytest) and a ``TimeoutError`` (for
    code that waits outside a test)."""


def wait_until(cond: Callable[[], object], timeout_s: float = WAIT_S, what: str = "", *,
               poll_s: float | None = None, ssc: Any = None,
               details: Callable[[], str] | None = None,
               abort: Callable[[], str | None] | None = None,
               progress: Callable[[], object] | None = None,
               stall_s: float | None = None) -> None:
    """Poll ``cond`` until it is true; raise :class:`WaitTimeoutError` after ``timeout_s``.

    The error reads ``timed out after {timeout_s}s waiting for {what}`` (``what``
    defaults to ``cond``'s repr), followed by ``details()`` when given (a log's
    tail, say). ``poll_s`` is the pause between polls: 5 ms, or 50 ms with ``ssc``.
    ``ssc``, a started StreamingContext, is waited on between polls
    (``awaitTerminationOrTimeout``), so a failed batch's error is raised at once
    instead of after the timeout. Returns ``None``.

    ``abort`` fails the wait early: it is called after each false ``cond`` and,
    when it returns a reason (a string, say "the app exited (1)"), the wait
    raises at once with ``gave up waiting for {what}: {reason}`` (and
    ``details()``). Use it when the thing waited for can no longer happen, such
    as a process that has exited.

    ``progress`` with ``stall_s`` makes the wait last as long as something
    moves: ``progress()`` (a count of completed batches, say) is sampled at each
    poll, and the wait fails when its value has not changed for ``stall_s``.
    ``timeout_s`` stays the bound of the whole wait. Use it for work whose
    length is unknown but whose progress is visible.
    """
    if (progress is None) != (stall_s is None):
        raise ValueError("progress and stall_s go together")
    pause = poll_s if poll_s is not None else (0.05 if ssc is not None else 0.005)
    start = time.monotonic()
    deadline = start + timeout_s
    seen = progress() if progress is not None else None
    seen_at = start
    target = what or cond

    def fail(message: str) -> WaitTimeoutError:
        if details is not None:
            message += "\n" + details()
        return WaitTimeoutError(message)

    while not cond():
        reason = abort() if abort is not None else None
        if reason is not None:
            raise fail(f"gave up waiting for {target}: {reason}")
        now = time.monotonic()
        if now > deadline:
            raise fail(f"timed out after {timeout_s:g}s waiting for {target}")
        if progress is not None and stall_s is not None:
            current = progress()
            if current != seen:
                seen, seen_at = current, now
            elif now - seen_at > stall_s:
                raise fail(f"timed out waiting for {target}: no progress for "
                           f"{now - seen_at:.0f}s, {now - start:.0f}s in all")
        if ssc is not None:
            ssc.awaitTerminationOrTimeout(pause)
        else:
            time.sleep(pause)
