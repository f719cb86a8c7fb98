"""The soak benchmark's figures over several runs: growth, verdicts, the saved runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.recovery_runs import Recovery
from bench.soak_bench import SIZES, Soak, memory_rows, plot_path, render, series_growth
from bench.soak_probe import PARTS

WARMUP_S = 300.0


def _soak(jvm_end: float, first_batch_s: float) -> Soak:
    """A 20-minute soak whose JVM goes from 400 MiB to ``jvm_end`` after minute 10,
    every other part flat at 100 MiB."""
    samples = []
    for t in range(0, 1200, 10):
        parts = dict.fromkeys(PARTS, 100.0)
        parts["driver JVM"] = 400.0 if t < 600 else jvm_end
        samples.append((float(t), parts))
    rec = Recovery("ours", 1000, 1200.0, nominal_blocks=1010, exact_blocks=1001,
                   first_batch_s=first_batch_s, caught_up_s=60.0, batches_rerun=100)
    return Soak(rate=16000.0, samples=samples, sent=19_000_000, achieved=15990.0,
                recovery=rec, jvm_gc=(420.0, 60.0),
                heap_after_gc=[(60.0 * k + 30, 50.0) for k in range(20)],
                live_classes=[("[B", 21.9, 75_255)])


def test_series_growth_compares_the_first_minute_after_warm_up_with_the_last_tenth() -> None:
    series = [(float(t), 100.0 if t < 400 else 120.0) for t in range(0, 1200, 10)]
    base, end, growth = series_growth(series, warmup_s=WARMUP_S)
    assert (base, end) == (100.0, 120.0)
    assert growth == pytest.approx(0.20)


def test_series_growth_needs_samples_after_warm_up() -> None:
    with pytest.raises(ValueError, match="too few samples"):
        series_growth([(0.0, 1.0), (400.0, 2.0)], warmup_s=WARMUP_S)


def test_the_verdict_is_on_the_median_run_and_counts_the_runs_under_the_target() -> None:
    soaks = [_soak(420.0, 5.0), _soak(480.0, 6.0), _soak(430.0, 7.0)]  # +5%, +20%, +7.5%
    rows, verdicts = memory_rows(soaks, WARMUP_S)
    jvm = next(v for v in verdicts if v.startswith("- driver JVM"))
    assert "+7.5% [+5.0%, +20.0%]" in jvm
    assert "2 of 3 runs under it" in jvm
    assert jvm.endswith("**met**")
    row = next(r for r in rows if r[0] == "driver JVM")
    assert row[1:4] == ["400", "430", "480"]  # medians of base and end; peak of any run
    assert all(v.endswith("**met**") for v in verdicts)


def test_a_median_over_the_target_misses_even_when_one_run_met_it() -> None:
    soaks = [_soak(420.0, 5.0), _soak(480.0, 6.0), _soak(460.0, 7.0)]  # +5%, +20%, +15%
    _, verdicts = memory_rows(soaks, WARMUP_S)
    jvm = next(v for v in verdicts if v.startswith("- driver JVM"))
    assert "1 of 3 runs under it" in jvm and jvm.endswith("**missed**")


def test_runs_survive_the_json_round_trip_and_render_the_same() -> None:
    soaks = [_soak(420.0, 5.0), _soak(480.0, 6.5)]
    back = [Soak.from_json(json.loads(json.dumps(s.to_json()))) for s in soaks]
    assert back[1].recovery is not None and back[1].recovery.first_batch_s == 6.5
    assert back[0].jvm_gc == (420.0, 60.0)
    facts = {"CPU": "2 cores, test"}
    first = render(soaks, SIZES["full"], facts, "full", 10.0, None)
    again = render(back, SIZES["full"], facts, "full", 10.0, None)
    strip = [line for line in first.splitlines() if not line.startswith("Generated")]
    assert strip == [line for line in again.splitlines() if not line.startswith("Generated")]
    assert "First batch **5.8 [5.0, 6.5] s**" in first
    assert "2 runs, each on a broker and app of its own" in first


def test_each_results_file_gets_its_own_plot_beside_it() -> None:
    assert plot_path(Path("bench/results/RESULTS-soak.md")) == Path("bench/results/soak.png")
    assert plot_path(Path("out/RESULTS-soak-gc.md")) == Path("out/soak-gc.png")
