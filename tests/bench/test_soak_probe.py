"""The soak probe's GC-log reading: its figures go into RESULTS-soak.md."""

from __future__ import annotations

from pathlib import Path

from bench.soak_probe import heap_after_gc

T0 = 1_795_596_000.0  # wall seconds at the start of the soak's history


def _line(seconds: float, what: str, before: int, after: int, committed: int) -> str:
    return (f"[{int((T0 + seconds) * 1000)}ms] GC(1) Pause {what} "
            f"(G1 Evacuation Pause) {before}M->{after}M({committed}M) 1.4ms")


def test_heap_after_gc_keeps_the_lowest_figure_of_each_minute(tmp_path: Path) -> None:
    log = tmp_path / "gc.log"
    log.write_text("\n".join([
        _line(-5, "Young (Normal)", 90, 10, 400),  # before the history: left out
        _line(10, "Young (Normal)", 200, 60, 400),
        _line(40, "Young (Mixed)", 180, 45, 400),
        "[1795596070000ms] GC(9) Concurrent Mark Cycle 12.3ms",  # no heap figures
        _line(70, "Young (Normal)", 210, 52, 480),
        _line(100, "Full (System.gc())", 300, 50, 480),
    ]) + "\n")
    assert heap_after_gc(log, T0) == [(30.0, 45.0), (90.0, 50.0)]


def test_heap_after_gc_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert heap_after_gc(tmp_path / "none.log", T0) == []
