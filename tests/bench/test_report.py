"""bench.report's run-length table, read from the recovery benchmark's .json files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import backlog_points, provenance, restart_caveat, run_length, verdicts


def _write(path: Path, history_s: float, spark_first: list[float | None],
           ours_first: list[float | None], cpu: str | None = "2 cores, Some CPU",
           kills: int = 1) -> Path:
    cell = {"caught": [60.0], "blocks": [1000], "exact": []}
    if cpu is not None:  # the results file beside the .json, as recovery_bench writes it
        path.with_suffix(".md").write_text(
            f"# Recovery\n\n|  |  |\n|---|---|\n| **CPU** | {cpu} |\n| **Code** | git abc |\n")
    path.write_text(json.dumps({
        "history_s": history_s, "block_ms": 100, "rate": 2000.0, "runs": len(ours_first),
        "kills": kills,
        "cells": {"spark": {"1000": {**cell, "first": spark_first}},
                  "ours": {"1000": {**cell, "first": ours_first}}}}))
    return path


def test_flat_when_the_long_history_restarts_as_fast(tmp_path: Path) -> None:
    short = _write(tmp_path / "RESULTS-recovery.json", 60, [8.0, 7.9, 8.1], [6.0, 6.2, None])
    long = _write(tmp_path / "RESULTS-recovery-history.json", 1800, [8.4], [6.5])
    lines = run_length([long, short])
    table = lines[0].splitlines()
    assert table[2].startswith("| 1 min | [RESULTS-recovery](RESULTS-recovery.md) | 3 | "
                               "2 cores, Some CPU, git abc |")
    assert "| 6.1 [6.0, 6.2] |" in table[2]  # a run without a first batch is left out
    assert table[3].startswith("| 30 min |")
    # 6.5 / 6.1 = 1.07: within 1.2x
    assert verdicts(lines[-1]) == [(
        "walstream's first batch after 30 min / after 1 min of history, backlog 1,000 "
        "blocks: 1.07 (target: flat, within 1.2x): met; Spark's: 1.05", "met")]


def test_missed_when_the_restart_grows_with_history(tmp_path: Path) -> None:
    short = _write(tmp_path / "a.json", 60, [8.0], [6.0])
    long = _write(tmp_path / "b.json", 1800, [8.0], [9.0])
    assert verdicts(run_length([short, long])[-1])[0][1] == "missed"


def test_nothing_without_both_files(tmp_path: Path) -> None:
    short = _write(tmp_path / "a.json", 60, [8.0], [6.0])
    assert run_length([short, tmp_path / "missing.json"]) == []


def test_no_verdict_across_machines(tmp_path: Path) -> None:
    # Two machines of different speed would make any ratio look flat or not.
    short = _write(tmp_path / "a.json", 60, [8.0], [6.0], cpu="2 cores, Intel(R) Xeon(R)")
    long = _write(tmp_path / "b.json", 1800, [6.0], [5.0], cpu="2 cores, AMD EPYC")
    lines = run_length([short, long])
    assert verdicts(lines[-1]) == []
    assert "not comparable" in lines[-1] and "different machines" in lines[-1]
    assert "AMD EPYC" in lines[0] and "Intel(R) Xeon(R)" in lines[0]


def test_provenance_reads_the_results_file_beside_the_json(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.json", 60, [8.0], [6.0], cpu="2 cores, X")
    assert provenance(path) == {"CPU": "2 cores, X", "Code": "git abc"}
    assert provenance(_write(tmp_path / "b.json", 60, [8.0], [6.0], cpu=None)) == {}


def test_spark_ratio_flagged_when_it_recovered_on_another_master(tmp_path: Path) -> None:
    # Runs written before the benchmark gave Spark its master say nothing: local[*].
    short = _write(tmp_path / "a.json", 60, [8.0], [6.0])
    data = json.loads(short.read_text())
    short.write_text(json.dumps({**data, "spark_restart_master": "local[3]"}))
    long = _write(tmp_path / "b.json", 1800, [9.0], [6.3])
    line = run_length([short, long])[-1]
    assert verdicts(line)[0][1] == "met"  # walstream's own ratio still stands
    assert ("Spark's: 1.12 (not comparable: Spark recovered on local[3] after the short "
            "history, on local[*] after the long one)") in line


def test_backlog_points_gather_every_file_by_receivers_and_cpu(tmp_path: Path) -> None:
    small = _write(tmp_path / "a.json", 60, [8.0, 9.0, 7.0], [6.0, 5.0, None])
    large = tmp_path / "b.json"
    large.write_text(json.dumps({
        "history_s": 60, "receivers": 10, "cells": {
            "ours": {"100000": {"first": [20.0], "caught": [None], "blocks": [100230]}},
            "spark": {"100000": {"first": [None], "caught": [None], "blocks": [100100]}}}}))
    other = _write(tmp_path / "c.json", 60, [12.0], [9.0], cpu="2 cores, Other CPU")
    points = backlog_points([small, large, other, tmp_path / "missing.json"])
    # A run with no first batch gives no point; one from another CPU kind (or with no
    # results file to name it) a line of its own, never joined to the others.
    assert points == {("spark", 1, "Some CPU"): [(1000, 8.0)],
                      ("ours", 1, "Some CPU"): [(1000, 5.5)],
                      ("ours", 10, "?"): [(100230, 20.0)],
                      ("spark", 1, "Other CPU"): [(1000, 12.0)],
                      ("ours", 1, "Other CPU"): [(1000, 9.0)]}


def test_restart_caveat_only_for_runs_without_spark_master(tmp_path: Path) -> None:
    old = _write(tmp_path / "a.json", 60, [8.0], [6.0])
    assert "local[*]" in restart_caveat(old)
    data = json.loads(old.read_text())
    old.write_text(json.dumps({**data, "spark_restart_master": "local[3]"}))
    assert restart_caveat(old) == ""
    assert restart_caveat(tmp_path / "missing.json") == ""
    soak = tmp_path / "RESULTS-soak.json"  # walstream's restart only: no Spark master
    soak.write_text(json.dumps({"size": "full", "facts": {}, "elapsed": 1.0, "runs": []}))
    assert restart_caveat(soak) == ""
    data.pop("spark_restart_master", None)
    old.write_text(json.dumps({**data, "cells": {"ours": data["cells"]["ours"]}}))
    assert restart_caveat(old) == ""


def test_run_length_sets_the_long_history_beside_a_short_one_of_its_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.report as report

    monkeypatch.setattr(report, "RESULTS", tmp_path)
    intel, amd = "2 cores, Intel(R) Xeon(R)", "2 cores, AMD EPYC"
    _write(tmp_path / "RESULTS-recovery.json", 60, [8.4], [5.9], cpu=intel)
    other = _write(tmp_path / "RESULTS-recovery-kills.json", 60, [11.9], [7.7], cpu=amd)
    long = _write(tmp_path / "RESULTS-recovery-history.json", 1800, [12.0], [8.0], cpu=amd)
    assert report._run_length_files() == [other, long]
    assert verdicts(run_length()[-1])[0][1] == "met"  # 8.0 / 7.7 on one machine
    _write(long, 1800, [9.0], [6.3], cpu=intel)
    assert report._run_length_files()[0].name == "RESULTS-recovery.json"


def test_run_length_prefers_a_short_history_with_the_long_ones_kills(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Later kills of a run follow earlier restarts of the same app: only the same
    # kills per run on both sides leaves the history as the one difference.
    import bench.report as report

    monkeypatch.setattr(report, "RESULTS", tmp_path)
    amd = "2 cores, AMD EPYC"
    kills = _write(tmp_path / "RESULTS-recovery-kills.json", 60, [13.0, 12.5, 13.5],
                   [8.5, 8.1, 7.2], cpu=amd, kills=3)
    # Newer, but one kill per run: not the like-for-like file.
    _write(tmp_path / "RESULTS-recovery.json", 60, [11.9], [7.7], cpu=amd)
    long = _write(tmp_path / "RESULTS-recovery-history.json", 1800, [14.4, 12.4, 13.9],
                  [7.6, 9.5, 10.0], cpu=amd, kills=3)
    data = json.loads(kills.read_text())
    kills.write_text(json.dumps({**data, "sessions": [{"generated": "2026-01-01 00:00:00"}]}))
    assert report._run_length_files() == [kills, long]
    lines = run_length()
    assert "| 3 (3 kills per run) |" in lines[0]
    assert verdicts(lines[-1])[0][1] == "met"  # 9.5 / 8.1 = 1.17
    _write(long, 1800, [14.4], [7.6], cpu=amd)  # one kill: the newest short one again
    assert report._run_length_files()[0].name == "RESULTS-recovery.json"


def test_figure_is_the_target_line_without_its_target_and_verdict() -> None:
    from bench.report import figure

    lines = {
        "100 B, 1 receiver, local[3]: 0.17x raw (target 0.7x) -> missed":
            "100 B, 1 receiver, local[3]: 0.17x raw",
        "Throughput (b)/(a): 2.00x (target >= 2x): met, but only on the medians of all":
            "Throughput (b)/(a): 2.00x, but only on the medians of all",
        "backlog 100: first batch (b)/(a) = 0.62 (target <= 0.5): missed":
            "backlog 100: first batch (b)/(a) = 0.62",
        "driver JVM: -1.7% [-5.7%, -1.4%] (target < 10%; 3 of 3 runs under it): met":
            "driver JVM: -1.7% [-5.7%, -1.4%] (3 of 3 runs under it)",
        "walstream's first batch ...: 1.06 (target: flat, within 1.2x): met; Spark's: 1.17":
            "walstream's first batch ...: 1.06; Spark's: 1.17",
        "no target here": "no target here",
    }
    for line, expected in lines.items():
        assert figure(line) == expected


def test_summary_has_one_row_per_target_line_linking_into_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.report as report

    results, decisions = tmp_path / "results", tmp_path / "decisions"
    results.mkdir()
    decisions.mkdir()
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "DECISIONS", decisions)
    amd = "2 cores, AMD EPYC"
    _write(results / "RESULTS-recovery.json", 60, [12.0], [7.0], cpu=amd)
    md = results / "RESULTS-recovery.md"
    md.write_text(md.read_text() + "\n- backlog 100: first batch (b)/(a) = **0.45** "
                  "(target <= 0.5): **met**\n- backlog 1,000: first batch (b)/(a) = **0.58** "
                  "(target <= 0.5): **missed**\n")
    (results / "RESULTS-wal.md").write_text("# WAL\n\n| **CPU** | 2 cores, X |\n")
    (decisions / "archive.md").write_text("# The class archive\n\nSee bench/RESULTS-x.md.\n")
    (decisions / "unrelated.md").write_text("# Something else\n")
    text = report.render()
    row = next(line for line in text.splitlines() if "RESULTS-recovery.md" in line
               and "0.58" in line)
    caveat = (" (Spark recovered on local[*], one task slot fewer than walstream: its "
              "times are too slow; re-run)")
    # One row per file: each target line on a line of its own in the cell.
    assert row == ("| [Recovery after a driver SIGKILL, 10^2 and 10^3 blocks]"
                   "(results/RESULTS-recovery.md) | first batch <= 0.5x Spark's | "
                   f"backlog 100: first batch (b)/(a) = 0.45{caveat}<br>"
                   f"backlog 1,000: first batch (b)/(a) = 0.58{caveat} | "
                   "1 met, 1 missed | AMD EPYC, git abc |")
    assert "1 of 2 target lines met." in text
    assert "| [WAL write throughput vs raw produce](results/RESULTS-wal.md) | none " in text
    assert "| Soak: RSS over 30 minutes at half the sustained rate | growth < 10% | not run |" \
        in text
    assert "- [The class archive](../docs/decisions/archive.md)" in text
    assert "Something else" not in text
    assert "`make bench`" in text and "`make bench-smoke`" in text


def test_main_writes_the_summary_and_the_run_length_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.report as report

    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "SUMMARY", tmp_path / "RESULTS.md")
    monkeypatch.setattr(report, "DECISIONS", tmp_path / "none")
    amd = "2 cores, AMD EPYC"
    _write(results / "RESULTS-recovery-kills.json", 60, [13.0], [8.0], cpu=amd, kills=3)
    _write(results / "RESULTS-recovery-history.json", 1800, [14.0], [8.4], cpu=amd, kills=3)
    assert report.main() == 0
    page = (results / "RESULTS-run-length.md").read_text()
    assert "| **CPU** | 2 cores, AMD EPYC |" in page
    assert "[RESULTS-recovery-kills](RESULTS-recovery-kills.md)" in page
    summary = (tmp_path / "RESULTS.md").read_text()
    assert ("| [Recovery against run length (walstream)](results/RESULTS-run-length.md) | "
            "flat: within 1.2x of after 1 minute | ") in summary
    assert "| met | AMD EPYC, git abc / git abc |" in summary
    # Without both files there is no comparison, and no stale page is left behind.
    (results / "RESULTS-recovery-history.json").unlink()
    assert report.main() == 0
    assert not (results / "RESULTS-run-length.md").exists()
