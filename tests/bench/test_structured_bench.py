"""bench.structured_bench: the table from the runs, and a failed restart named."""

from __future__ import annotations

from pathlib import Path

from bench.structured_bench import SIZES, Recovery, Result, query_error, render


def test_render_gives_rates_recovery_losses_and_the_ratio() -> None:
    results = {
        "spark": Result("spark", [30_000.0],
                        [Recovery(1.5, float("nan"), 40_000, 33_000,
                                  "Offsets committed out of order: 33239 followed by -1")]),
        "ours": Result("ours", [45_000.0], [Recovery(2.0, 9.5, 96_000, 95_800)], at_top=1),
    }
    text = render(results, {"CPU": "2 cores, Test CPU"}, SIZES["small"], "small", 600.0)
    assert "Sustained throughput (b)/(a): **1.50x**." in text
    assert "| (a) Spark `format(\"socket\")` | 1 | 30000 [30000, 30000] | n/a |" in text
    assert "| 9.5 [9.5, 9.5] |" in text  # ours: restart -> first batch with input
    assert "| 200 [200, 200] |" in text  # ours: lines lost
    assert "1 of 1 run(s) sustained every step of the ladder" in text
    assert "- (a) Spark `format(\"socket\")`: `Offsets committed out of order: 33239 " \
           "followed by -1`" in text


def test_query_error_takes_sparks_message_without_its_sqlstate(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("noise\npyspark...StreamingQueryException: [STREAM_FAILED] Query [id = x] "
                   "terminated with exception: Offsets committed out of order: 5 followed "
                   "by -1 SQLSTATE: XXKST\nmore\n")
    assert query_error(log) == "Offsets committed out of order: 5 followed by -1"
    assert query_error(tmp_path / "absent.log") == ""
