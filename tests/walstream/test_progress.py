"""ProgressReporter: reports at most every interval (by an injected clock) and once at
the end; a snapshot gives rate and ETA, and says when the total is not known."""

from __future__ import annotations

import logging

import pytest

from walstream.progress import Extent, ProgressReporter, ProgressSnapshot, log_sink


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reports_at_most_every_interval_and_once_at_the_end() -> None:
    clock = Clock()
    seen: list[tuple[ProgressSnapshot, bool]] = []
    p = ProgressReporter(lambda s, final: seen.append((s, final)), interval_s=5.0,
                         clock=clock)
    p.start()
    for _ in range(12):  # one unit per second
        clock.now += 1.0
        p.advance()
    assert [(s.done, final) for s, final in seen] == [(5, False), (10, False)]
    end = p.finish()
    assert p.finish() is end  # once
    assert [(s.done, final) for s, final in seen][-1] == (12, True)
    assert end.elapsed_s == pytest.approx(12.0)
    assert end.rate == pytest.approx(1.0)


def test_a_snapshot_with_a_total_has_an_eta_and_without_one_says_so() -> None:
    known = ProgressSnapshot(done=1200, elapsed_s=3.0, total=5000)
    assert known.rate == pytest.approx(400.0)
    assert known.eta_s == pytest.approx(9.5)
    assert known.describe() == ("1,200 of 5,000 events (24%) in 3.0 s, 400 events/s, "
                                "ETA 9.5 s")
    unknown = ProgressSnapshot(done=1200, elapsed_s=3.0)
    assert unknown.eta_s is None
    assert "total not known before the end" in unknown.describe()
    assert ProgressSnapshot(0, 0.0).rate == 0.0


def test_log_sink_writes_one_line_per_report(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("walstream.test_progress")
    p = ProgressReporter(log_sink(logger, "replay"), interval_s=2.0, clock=clock,
                         total=4)
    p.start()
    with caplog.at_level(logging.INFO, logger=logger.name):
        for _ in range(4):
            clock.now += 1.0
            p.advance()
        p.finish()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["replay: 2 of 4 events (50%) in 2.0 s, 1.0 events/s, ETA 2.0 s",
                     "replay: 4 of 4 events (100%) in 4.0 s, 1.0 events/s, ETA 0.0 s",
                     "replay done: 4 of 4 events (100%) in 4.0 s, 1.0 events/s, ETA 0.0 s"]


def test_an_extent_gives_percent_and_eta_when_the_own_total_is_unknown() -> None:
    snap = ProgressSnapshot(done=1200, elapsed_s=3.0, extent=Extent(300, 1000))
    assert snap.eta_s == pytest.approx(7.0)  # 30% in 3 s: 70% in 7 s more
    assert snap.describe() == ("1,200 events, 300 of 1,000 WAL records (30%) in 3.0 s, "
                               "400 events/s, ETA 7.0 s")
    assert ProgressSnapshot(5, 1.0, extent=Extent(0, 10)).eta_s is None  # no pace yet
    assert "ETA unknown" in ProgressSnapshot(5, 1.0, extent=Extent(0, 10)).describe()
    assert ProgressSnapshot(5, 1.0, extent=Extent(10, 10)).eta_s == 0.0
    empty = Extent(0, 0)
    assert empty.fraction == 1.0 and empty.describe() == "0 of 0 WAL records (100%)"
    # An own total wins: its ETA is by the rate, as without an extent.
    both = ProgressSnapshot(1200, 3.0, total=5000, extent=Extent(300, 1000))
    assert both.eta_s == pytest.approx(9.5)


def test_a_reporter_reads_the_extent_it_follows_at_each_report() -> None:
    clock = Clock()
    read = {"done": 0}
    seen: list[tuple[ProgressSnapshot, bool]] = []
    p = ProgressReporter(lambda s, final: seen.append((s, final)), interval_s=2.0,
                         clock=clock)
    p.follow(lambda: Extent(read["done"], 4))
    p.start()
    for _ in range(4):
        clock.now += 1.0
        read["done"] += 1
        p.advance(3)
    p.finish()
    assert [(s.done, s.extent, final) for s, final in seen] == [
        (6, Extent(2, 4), False), (12, Extent(4, 4), False), (12, Extent(4, 4), True)]
    assert seen[0][0].eta_s == pytest.approx(2.0)
