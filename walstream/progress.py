"""Progress of long work (a WAL replay, a catch-up), reported at most every few seconds.

A :class:`ProgressReporter` counts what is done and hands a
:class:`ProgressSnapshot` to its sink at most once per ``interval_s`` (by its
clock, injectable for tests) and once more at :meth:`ProgressReporter.finish`.
The sink decides the output: :func:`log_sink` writes one log line per report
(driver logs, ``walstream inspect`` without a terminal), a progress bar may
follow the same reports (``walstream inspect`` on a terminal).

A total is optional: when the work cannot know its size before the end (a WAL
replay: its groups hold varying numbers of events), a snapshot has the count
and the rate, and says that the total is not known, never a guessed ETA. Such
work may still know its size in another unit: an :class:`Extent` (a WAL
replay's Kafka records, whose total the log's end offsets give exactly), which
a reporter reads from a source it :meth:`~ProgressReporter.follow` s at each
report. The snapshot then shows both, and its ETA comes from the extent's
fraction done and the time so far.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

#: How often a long replay or catch-up logs its progress.
DEFAULT_INTERVAL_S = 5.0


@dataclass(frozen=True)
class Extent:
    """``done`` of ``total`` units of a second measure of the same work, whose total
    is known from the start though the reporter's own unit's is not."""

    done: int
    total: int
    unit: str = "WAL records"

    @property
    def fraction(self) -> float:
        """The share done, in [0, 1]; 1 for an empty total."""
        return min(1.0, max(0, self.done) / self.total) if self.total > 0 else 1.0

    def describe(self) -> str:
        """``300 of 1,000 WAL records (30%)``."""
        return f"{self.done:,} of {self.total:,} {self.unit} ({100.0 * self.fraction:.0f}%)"


@dataclass(frozen=True)
class ProgressSnapshot:
    """``done`` units (of ``unit``) after ``elapsed_s``; ``total`` when known; ``extent``
    when the work also counts in a unit with a known total."""

    done: int
    elapsed_s: float
    total: int | None = None
    unit: str = "events"
    extent: Extent | None = None

    @property
    def rate(self) -> float:
        """Units per second so far (0 before any time passed)."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far: by the rate and the total, or without a
        total by the extent's fraction done; None when neither can tell yet."""
        if self.total is not None:
            return None if self.rate <= 0 else max(0, self.total - self.done) / self.rate
        if self.extent is None:
            return None
        fraction = self.extent.fraction
        if fraction >= 1.0:
            return 0.0
        if fraction <= 0 or self.elapsed_s <= 0:
            return None
        return self.elapsed_s * (1.0 - fraction) / fraction

    def describe(self) -> str:
        """``1200 of 5000 events (24%) in 3.0 s, 400 events/s, ETA 9.5 s``; without a
        total but with an extent, ``1200 events, 300 of 1000 WAL records (30%) in
        3.0 s, 400 events/s, ETA 7.0 s``; with neither, ``1200 events in 3.0 s, 400
        events/s (total not known before the end)``."""
        rate = f"{format_rate(self.rate)} {self.unit}/s"
        if self.total is None and self.extent is not None:
            eta = self.eta_s
            return (f"{self.done:,} {self.unit}, {self.extent.describe()} in "
                    f"{self.elapsed_s:.1f} s, {rate}, ETA "
                    + ("unknown" if eta is None else f"{eta:.1f} s"))
        if self.total is None:
            return (f"{self.done:,} {self.unit} in {self.elapsed_s:.1f} s, {rate} "
                    "(total not known before the end)")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = self.eta_s
        return (f"{self.done:,} of {self.total:,} {self.unit} ({pct:.0f}%) in "
                f"{self.elapsed_s:.1f} s, {rate}, ETA "
                + ("unknown" if eta is None else f"{eta:.1f} s"))


def format_rate(rate: float) -> str:
    """``12,345`` for a fast rate, ``2.5`` or ``0.25`` for a slow one."""
    if rate >= 100:
        return f"{rate:,.0f}"
    return f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"


Sink = Callable[[ProgressSnapshot, bool], None]


def log_sink(logger: logging.Logger, what: str, level: int = logging.INFO) -> Sink:
    """A sink writing ``<what>: <snapshot>`` while going and ``<what> done: ...`` at the end."""
    def report(snapshot: ProgressSnapshot, final: bool) -> None:
        logger.log(level, "%s%s: %s", what, " done" if final else "", snapshot.describe())
    return report


class ProgressReporter:
    """Counts work and reports it to ``sink`` at most every ``interval_s`` and at the end.

    Not thread-safe: one thread advances it. :meth:`advance` costs one clock read,
    cheap enough to call per event.
    """

    def __init__(self, sink: Sink, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, total: int | None = None,
                 unit: str = "events") -> None:
        self.sink = sink
        self.interval_s = interval_s
        self.clock = clock
        self.total = total
        self.unit = unit
        self.done = 0
        self._started: float | None = None
        self._last_report = 0.0
        self.finished: ProgressSnapshot | None = None
        self.extent: Callable[[], Extent | None] | None = None

    def follow(self, extent: Callable[[], Extent | None] | None) -> None:
        """Read the work's :class:`Extent` from ``extent`` at every snapshot (it may
        answer None while, or when, it does not know)."""
        self.extent = extent

    def start(self) -> None:
        """Start the clock (implied by the first :meth:`advance`)."""
        if self._started is None:
            self._started = self._last_report = self.clock()

    def snapshot(self) -> ProgressSnapshot:
        self.start()
        assert self._started is not None
        return ProgressSnapshot(self.done, max(0.0, self.clock() - self._started),
                                self.total, self.unit,
                                self.extent() if self.extent is not None else None)

    def advance(self, n: int = 1) -> None:
        """``n`` more units done; reports when ``interval_s`` passed since the last report."""
        self.start()
        self.done += n
        now = self.clock()
        if now - self._last_report >= self.interval_s:
            self._last_report = now
            self.sink(self.snapshot(), False)

    def finish(self) -> ProgressSnapshot:
        """Report once more, as final; returns that snapshot (later calls return it again)."""
        if self.finished is None:
            self.finished = self.snapshot()
            self.sink(self.finished, True)
        return self.finished
