"""bench.ingest_render: the ingest table's rates, ratios and verdicts from the runs."""

from __future__ import annotations

import argparse

from bench.ingest_config import IngestConfig, Results, RunResult
from bench.ingest_render import render


def _results() -> Results:
    res = Results(records={100: 1000, 10_000: 100})
    # 100 B: raw 1000 records in 1 s; one receiver 2 s and 1.25 s (0.5x and 0.8x raw).
    for raw, one in ((1.0, 2.0), (1.0, 1.25)):
        res.add(100, "raw", raw)
        run = RunResult(seconds=one, records=1000, blocks=4, first_report_s=0.3,
                        steady_rate=600.0, launch_s=1.0, raw_rate=1000.0)
        res.add(100, "one", one, run)
        res.ratios.setdefault((100, "one"), []).append(raw / one)
    # 10 KB: the receiver at 0.9x raw in the one run.
    res.add(10_000, "raw", 0.9)
    res.add(10_000, "one", 1.0, RunResult(seconds=1.0, records=100, blocks=1, raw_rate=111.1))
    res.ratios[(10_000, "one")] = [0.9]
    return res


def _render(res: Results) -> str:
    return render(res, {"CPU": "2 cores, Test CPU"}, argparse.Namespace(runs=2),
                  IngestConfig(), "load start", "load end", ["--size", "small"])


def test_rates_ratios_and_verdicts_per_record_size() -> None:
    text = _render(_results())
    # 100 B, one receiver: rates 500 and 800 records/s -> median 650; ratios 0.5 and 0.8
    # -> median 0.65, under the 0.7 target.
    assert "| 100 B | 1 receiver, local[3] | 2 | 650 [500, 800] |" in text
    assert "0.65 [0.50, 0.80] | missed |" in text
    assert "- 100 B, 1 receiver, local[3]: 0.65x raw (target 0.7x) -> **missed**" in text
    # 10 KB: 100 records/s = 1.0 MB/s, 0.9x raw -> met.
    assert "- 10000 B, 1 receiver, local[3]: 0.90x raw (target 0.7x) -> **met**" in text
    assert "| 10000 B | 1 receiver, local[3] | 1 | 100 [100, 100] | 1.0 [1.0, 1.0] |" in text
    # The raw rows are the reference (ratio 1, no verdict) and pool every raw run.
    assert "| 100 B | raw confluent-kafka produce | 2 | 1000 [1000, 1000] |" in text
    # The second-half rate and its ratio to the same iteration's raw run.
    assert "600 [600, 600] (0.60x)" in text
    assert "Command: `python -m bench.ingest_bench --size small`" in text
    assert "| **CPU** | 2 cores, Test CPU |" in text


def test_no_profile_section_without_a_profiled_pass() -> None:
    assert "Where the time goes" not in _render(_results())


def test_one_receiver_against_the_read_ceiling_has_a_verdict_in_three_decimals() -> None:
    res = _results()
    # The bare consumer read the source in 1.58 s and 1.00 s: per-iteration ratios
    # 1.58/2.0 = 0.79 and 1.00/1.25 = 0.80 -> median 0.795, just under 0.8.
    for s in (1.58, 1.0):
        res.add(100, "consume", s)
    text = _render(res)
    assert "- 100 B: 1 receiver = 0.80 [0.79, 0.80] of the read ceiling" in text
    assert ("- 100 B, 1 receiver against the read ceiling: 0.795x (target 0.8x) -> "
            "**missed**") in text
