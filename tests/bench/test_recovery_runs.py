"""Pooling recovery runs across invocations (``recovery_bench --append``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.common import machine_info
from bench.recovery_bench import main
from bench.recovery_render import render
from bench.recovery_runs import (
    Cell,
    IncomparableRunsError,
    Recovery,
    cells_json,
    compared,
    load_earlier,
    prefill,
    sessions_line,
)

CPU = "2 cores, Some CPU"
CFG: dict[str, Any] = {"history_s": 1800.0, "block_ms": 100, "receivers": 1}


def _session(runs: int, cpu: str = CPU) -> dict[str, Any]:
    return {"generated": "2026-11-25 13:57:27", "code": "git abc", "cpu": cpu, "runs": runs}


def _cells(first_ours: list[float]) -> dict[tuple[str, int], Cell]:
    return {("spark", 1000): Cell(first=[9.0] * len(first_ours), caught=[120.0] * len(first_ours),
                                  blocks=[1010] * len(first_ours)),
            ("ours", 1000): Cell(first=first_ours, caught=[math.nan] * len(first_ours),
                                 blocks=[1005] * len(first_ours), exact=[1003] * len(first_ours))}


def _saved(tmp_path: Path, first_ours: list[float], cfg: dict[str, Any] = CFG,
           cpu: str = CPU) -> Path:
    path = tmp_path / "RESULTS-recovery-history.json"
    path.write_text(json.dumps(cells_json(_cells(first_ours), cfg,
                                          [_session(len(first_ours), cpu)])))
    return path


def test_no_file_no_earlier_runs(tmp_path: Path) -> None:
    assert load_earlier(tmp_path / "none.json", compared(CFG), CPU, ["spark", "ours"],
                        [1000]) is None


def test_runs_pool_into_each_cell_in_order(tmp_path: Path) -> None:
    path = _saved(tmp_path, [6.3])
    earlier = load_earlier(path, compared(CFG), CPU, ["spark", "ours"], [1000])
    assert earlier is not None and earlier.runs == 1
    cells = {(impl, 1000): Cell() for impl in ("spark", "ours")}
    prefill(cells, earlier)
    cells[("ours", 1000)].first.append(6.1)
    ours = cells[("ours", 1000)]
    assert ours.first == [6.3, 6.1] and ours.blocks == [1005] and ours.exact == [1003]
    assert math.isnan(ours.caught[0])  # null in the .json: a run that did not catch up
    out = cells_json(cells, CFG, [*earlier.sessions, _session(1)])
    assert out["runs"] == 2 and out["spark_restart_master"] == "local[3]"
    assert out["cells"]["ours"]["1000"]["caught"] == [None]


@pytest.mark.parametrize(("what", "change"), [
    ("history_s", {"history_s": 60.0}),
    ("receivers", {"receivers": 10}),
    ("block_ms", {"block_ms": 50}),
    ("kills", {"kills": 3}),
])
def test_other_configuration_is_refused(tmp_path: Path, what: str,
                                        change: dict[str, Any]) -> None:
    path = _saved(tmp_path, [6.3])
    with pytest.raises(IncomparableRunsError, match=what):
        load_earlier(path, compared({**CFG, **change}), CPU, ["spark", "ours"], [1000])


def test_another_cpu_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, [6.3], cpu="2 cores, AMD EPYC")
    with pytest.raises(IncomparableRunsError, match="AMD EPYC"):
        load_earlier(path, compared(CFG), "2 cores, Intel(R) Xeon(R) Processor",
                     ["spark", "ours"], [1000])


def test_other_backlogs_or_systems_are_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, [6.3])
    with pytest.raises(IncomparableRunsError, match="backlogs"):
        load_earlier(path, compared(CFG), CPU, ["spark", "ours"], [1000, 10000])
    with pytest.raises(IncomparableRunsError, match="backlogs"):
        load_earlier(path, compared(CFG), CPU, ["ours"], [1000])


def test_a_file_from_before_sessions_reads_its_results_file(tmp_path: Path) -> None:
    # Written before the benchmark gave Spark its master: it recovered on local[*],
    # so its Spark runs do not pool with runs that restart Spark on local[3].
    path = tmp_path / "RESULTS-recovery-history.json"
    path.write_text(json.dumps({"history_s": 1800.0, "block_ms": 100, "rate": 2000.0,
                                "runs": 1, "cells": {}}))
    with pytest.raises(IncomparableRunsError, match="spark_restart_master"):
        load_earlier(path, compared(CFG), CPU, ["ours"], [1000])
    legacy = {"history_s": 1800.0, "block_ms": 100, "rate": 2000.0,
              "spark_restart_master": "local[3]", "runs": 1,
              "cells": {"ours": {"1000": {"first": [6.3], "caught": [72.6], "blocks": [1000],
                                          "exact": [998]}}}}
    path.write_text(json.dumps(legacy))
    path.with_suffix(".md").write_text(
        "# R\n\nGenerated 2026-11-25 13:57:27 UTC by x\n\n| **CPU** | 2 cores, Some CPU |\n"
        "| **Code** | git b4f00d3 |\n")
    earlier = load_earlier(path, compared(CFG), CPU, ["ours"], [1000])
    assert earlier is not None
    assert sessions_line(earlier.sessions) == "1 on 2026-11-25 13:57:27 UTC (git b4f00d3)"


def test_append_refuses_before_measuring(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "RESULTS-x.md"
    other_cpu = "1 cores, Not This One"
    assert other_cpu != machine_info("")["CPU"]
    cfg = {"history_s": 60.0, "block_ms": 100, "receivers": 1}
    _saved(tmp_path, [6.3], cfg, cpu=other_cpu).rename(out.with_suffix(".json"))
    with pytest.raises(SystemExit) as exc:  # no broker, no app: refused at once
        main(["--size", "full", "--backlogs", "1000", "--append", "--out", str(out)])
    assert exc.value.code == 2
    assert "Not This One" in capsys.readouterr().err


def _recovery(first: float, ran_s: float, note: str = "") -> Recovery:
    r = Recovery("ours", 1000, 1800.0, nominal_blocks=1010, exact_blocks=1003,
                 first_batch_s=first, caught_up_s=70.0, note=note)
    r.ran_s = ran_s
    return r


def test_every_kill_of_a_run_is_one_measurement_with_its_run_length(tmp_path: Path) -> None:
    cell = Cell()
    for first, ran in [(6.3, 1900.0), (6.1, 2140.0), (6.4, 2380.0)]:
        cell.add(_recovery(first, ran))
    assert cell.first == [6.3, 6.1, 6.4] and cell.ran == [1900.0, 2140.0, 2380.0]
    assert cell.example is not None and cell.example.first_batch_s == 6.3  # the first kill
    cfg = {**CFG, "kills": 3}
    out = cells_json({("ours", 1000): cell, ("spark", 1000): Cell()}, cfg, [_session(1)])
    assert out["kills"] == 3 and out["cells"]["ours"]["1000"]["ran_s"] == [1900.0, 2140.0,
                                                                           2380.0]
    assert "spark" not in out["cells"]  # nothing measured, nothing written
    earlier = load_earlier(_write(tmp_path, out), compared(cfg), CPU, ["ours"], [1000])
    assert earlier is not None
    again = {("ours", 1000): Cell(), ("spark", 1000): Cell()}
    prefill(again, earlier)
    assert again[("ours", 1000)].ran == [1900.0, 2140.0, 2380.0]


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "RESULTS-k.json"
    path.write_text(json.dumps(data))
    return path


def test_the_results_file_says_when_each_kill_fell() -> None:
    spark, ours = Cell(), Cell()
    for first, ran in [(6.3, 1900.0), (6.1, 2140.0)]:
        ours.add(_recovery(first, ran))
        spark.add(_recovery(9.0, ran + 600))
    cells = {("spark", 1000): spark, ("ours", 1000): ours}
    facts = {"CPU": CPU, "Code": "git abc"}
    text = render(cells, [1000], {**CFG, "kills": 2}, facts, "full", [_session(1)], 10.0, [])
    assert "| **Kills** | 2 per run" in text
    assert "ours 31.7, 35.7; spark 41.7, 45.7" in text
    assert "6.2 [6.1, 6.3]" in text  # both kills in the cell's median [min, max]
    one = render(cells, [1000], {**CFG, "kills": 1}, facts, "full", [_session(1)], 10.0, [])
    assert "**Kills**" not in one
