"""The peer benchmark's report: the floor row and each system's fraction of it."""

from __future__ import annotations

from bench.peer_apps import AppRun
from bench.peer_bench import SIZES, Result, floor_fractions, render


def _result(impl: str, rates: list[float], p99: list[float]) -> Result:
    return Result(impl, rates=rates, p50=[v / 2 for v in p99], p99=p99,
                  counted_ok=[True] * len(rates), ladders=[AppRun(impl)])


def test_each_run_is_divided_by_the_floor_of_the_same_run() -> None:
    floor = Result("floor", rates=[100_000.0, 50_000.0])
    ours = _result("ours", [80_000.0, 45_000.0], [900.0, 1000.0])
    assert floor_fractions(ours, floor) == [0.8, 0.9]


def test_the_report_has_the_floor_row_and_the_floor_targets() -> None:
    floor = Result("floor", rates=[110_000.0], counted_ok=[True])
    spark = _result("spark", [22_000.0], [9000.0])
    ours = _result("ours", [66_000.0], [1400.0])
    cfg = dict(SIZES["small"], words_per_line=12)
    text = render([spark, ours], floor, {"CPU": "test"}, cfg, "small", 1.0, None)
    assert "(c) the same word count, a batch job over the lines in memory" in text
    assert "| 110000 [110000, 110000] |" in text  # the floor's own row
    assert "(b) sustained / floor (c): **0.60x** (target >= 0.8x): **missed**" in text
    assert "(a) sustained / floor (c): 0.20x" in text
    assert "1400 ms (target <= 1500 ms): **met**" in text
    assert "Throughput (b)/(a): **3.00x**" in text


def test_ten_kilobyte_lines_report_megabytes_per_second() -> None:
    floor = Result("floor", rates=[1000.0], counted_ok=[True])
    ours = _result("ours", [900.0], [1000.0])
    cfg = dict(SIZES["small"], words_per_line=1250)
    text = render([ours], floor, {"CPU": "test"}, cfg, "small", 1.0, None)
    assert "--impls ours --words-per-line 1250" in text
    assert "(b)/(a)" not in text  # Spark did not run
    assert "(b) sustained / floor (c): **0.90x** (target >= 0.8x): **met**" in text
    floor_row = next(line for line in text.splitlines() if line.startswith("| (c)"))
    assert "| 10.0 [10.0, 10.0] |" in floor_row  # 1000 lines/s of 10 KB lines


def test_a_ladder_sustained_to_its_top_is_reported_as_a_lower_bound() -> None:
    from bench.peer_apps import Phase
    from bench.peer_bench import ladder_topped

    cfg = dict(SIZES["small"], words_per_line=12)
    run = AppRun("ours")
    run.phases = [Phase(1000.0) for _ in range(int(cfg["steps"]) - 1)]
    assert not ladder_topped(run, cfg)  # steps left: it stopped at a failed step
    floor = Result("floor", rates=[1000.0, 1000.0], counted_ok=[True, True])
    ours = _result("ours", [900.0, 800.0], [1000.0, 1000.0])
    ours.topped = [True, False]
    text = render([ours], floor, {"CPU": "test"}, cfg, "small", 1.0, None)
    assert ("sustained the ladder's top step in 1 of 2 runs: there its sustained rate, "
            "and its fraction of the floor, are lower bounds") in text
    ours.topped = [False, False]
    assert "top step" not in render([ours], floor, {"CPU": "test"}, cfg, "small", 1.0, None)
