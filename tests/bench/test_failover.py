"""The failover benchmark's parts that run without Spark: the cost probe, the role
file, the takeover figures, the results section and the command line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import failover_render, peer_app
from bench.failover_bench import nominal_blocks, roles, takeover_figures, wait_role
from bench.failover_probe import CostProbe, app_processes, group_rss_mib
from bench.recovery_bench import main
from bench.recovery_render import render
from bench.recovery_runs import (
    Cell,
    Recovery,
    cells_json,
    compared,
    load_earlier,
    prefill,
)

CPU = "2 cores, Some CPU"
CFG: dict[str, Any] = {"history_s": 60.0, "block_ms": 100, "receivers": 1, "kills": 1}
FACTS = {"CPU": CPU, "Code": "git abc"}
SESSION = {"generated": "2026-11-26 23:00:00", "code": "git abc", "cpu": CPU, "runs": 3}


# -- the cost probe -----------------------------------------------------------------


def test_the_app_is_its_group_and_every_descendant_whatever_its_group() -> None:
    # pid -> (ppid, pgrp): 10 leads its group; 11 is its JVM; 12 the worker daemon
    # (a group of its own, as pyspark.daemon makes it) and 13 its worker; 20 a stranger.
    table = {10: (1, 10), 11: (10, 10), 12: (11, 12), 13: (12, 12), 20: (1, 20),
             14: (1, 10)}  # 14: reparented to init, still in the group
    assert app_processes(10, table) == {10, 11, 12, 13, 14}
    assert app_processes(99, table) == set()


def test_the_probe_reads_the_cpu_and_memory_of_a_process_and_its_children() -> None:
    # A parent that sleeps and a child in a process group of its own that spins: the
    # child's CPU counts for the parent's app.
    spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n"
    code = ("import os, subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {spin!r}], "
            "preexec_fn=lambda: os.setpgid(0, 0))\ntime.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(app_processes(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(app_processes(parent.pid)) == 2
        with CostProbe({"app": parent.pid}, sample_s=0.2) as probe:
            time.sleep(1.5)
            costs = probe.stop()
        cost = costs["app"]
        assert cost.cpu_cores > 0.2  # the spinning child, on a machine that may be busy
        assert cost.cpu_cores <= 1.2
        assert len(cost.rss_samples) >= 3 and cost.rss_mib > 5
        assert math.isclose(cost.machine_share, cost.cpu_cores / (os.cpu_count() or 1))
        assert group_rss_mib(parent.pid) > 5
    finally:
        os.killpg(parent.pid, 9)
        parent.wait(10)
        for pid in app_processes(parent.pid):  # the child's group, if it outlived us
            os.kill(pid, 9)
    assert group_rss_mib(parent.pid) == 0.0


# -- roles and the takeover figures -------------------------------------------------


def _app(tmp_path: Path, pid: int, returncode: int | None = None) -> Any:
    log = tmp_path / "app.log"
    log.write_text("the app's log\n")
    return SimpleNamespace(proc=SimpleNamespace(pid=pid, returncode=returncode,
                                                poll=lambda: returncode), log_path=log)


def test_each_process_role_is_read_from_the_role_file(tmp_path: Path) -> None:
    path = tmp_path / "roles.jsonl"
    path.write_text(json.dumps({"pid": 1, "role": "leader", "wall": 1.0}) + "\n"
                    + json.dumps({"pid": 2, "role": "standby", "wall": 2.0}) + "\n{\"pid\"")
    assert roles(path) == {1: "leader", 2: "standby"}
    assert roles(tmp_path / "none.jsonl") == {}
    wait_role(path, _app(tmp_path, 2), "standby", timeout_s=1)
    with pytest.raises(RuntimeError, match="is the leader, not the standby"):
        wait_role(path, _app(tmp_path, 1), "standby", timeout_s=1)
    with pytest.raises(RuntimeError, match="exited"):
        wait_role(path, _app(tmp_path, 3, returncode=1), "standby", timeout_s=1)
    with pytest.raises(TimeoutError):
        wait_role(path, _app(tmp_path, 3), "standby", timeout_s=0.3)


def test_the_peer_app_writes_its_role_where_asked(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "roles.jsonl"
    peer_app._report_role(SimpleNamespace(ha_role="standby"))
    assert not path.exists()  # PEER_ROLES not set: nothing written
    monkeypatch.setenv("PEER_ROLES", str(path))
    peer_app._report_role(SimpleNamespace(ha_role="standby"))
    peer_app._report_role(SimpleNamespace(ha_role="none"))  # no high availability
    assert roles(path) == {os.getpid(): "none"}
    assert [json.loads(line)["role"] for line in path.read_text().splitlines()] == [
        "standby", "none"]


def test_the_takeover_is_timed_from_the_kill_on_the_standby_s_batches() -> None:
    killed = 1000.0
    batches = [{"t": 998_000, "wall": 999.0, "pid": 1, "fresh": 0},  # the leader
               {"t": 999_000, "wall": 1001.4, "pid": 2, "fresh": 0},  # backlog re-run
               {"t": 999_500, "wall": 1001.6, "pid": 2},
               {"t": 1_001_000, "wall": 1002.5, "pid": 2, "fresh": 0},  # caught up
               {"t": 1_002_000, "wall": 1003.1, "pid": 2, "fresh": 12}]  # new data
    fig = takeover_figures(batches, 2, killed)
    assert math.isclose(fig.first, 1.4) and math.isclose(fig.caught, 2.5) and fig.rerun == 2
    assert math.isclose(fig.fresh, 3.1)
    fig = takeover_figures(batches[:2], 2, killed)
    assert math.isclose(fig.first, 1.4) and math.isnan(fig.caught) and fig.rerun == 0
    assert math.isnan(fig.fresh)
    fig = takeover_figures(batches[:1], 2, killed)
    assert math.isnan(fig.first) and math.isnan(fig.caught) and math.isnan(fig.fresh)
    # Fresh data in a re-run batch's time slot counts too: what a user waits for.
    fig = takeover_figures([{"t": 999_000, "wall": 1002.0, "pid": 2, "fresh": 1}], 2, killed)
    assert math.isclose(fig.fresh, 2.0) and math.isnan(fig.caught)


def test_the_backlog_is_counted_as_for_the_cold_restart() -> None:
    assert nominal_blocks(10_500.0, 500, 100, 1, 9.0) == 100
    assert nominal_blocks(2_500.0, 500, 100, 10, 10.0) == 20 + 9 * 100


# -- the results file ---------------------------------------------------------------


def _recovery(impl: str, first: float, steady: dict[str, float] | None = None) -> Recovery:
    r = Recovery(impl, 1000, 60.0, nominal_blocks=1010, first_batch_s=first, caught_up_s=40.0,
                 fresh_data_s=first + 0.8)
    r.steady = dict(steady or {})
    return r


def _cells(ha_firsts: list[float]) -> dict[tuple[str, int], Cell]:
    cells = {(impl, b): Cell() for impl in ("spark", "ours", "ours-ha") for b in (100, 1000)}
    for b in (100, 1000):
        for first in (14.0, 15.0, 16.0):
            cells[("spark", b)].add(_recovery("spark", first))
            cells[("ours", b)].add(_recovery("ours", first / 2))
        for first in ha_firsts:
            cells[("ours-ha", b)].add(_recovery(
                "ours-ha", first if b == 100 else first + 1.0,
                {"standby_cpu": 0.1, "standby_rss_mib": 900.0, "leader_cpu": 0.6,
                 "leader_rss_mib": 1100.0}))
    return cells


def test_the_failover_section_gives_ratios_target_and_standby_cost() -> None:
    cells = _cells([1.5, 1.6, 1.7])
    text = render(cells, [100, 1000], CFG, FACTS, "full", [SESSION], 10.0, [])
    assert "and a hot standby's failover" in text.splitlines()[0]
    assert "## Failover: a hot standby takes over" in text
    # backlog 100: 1.6 s against Spark's 15.0 and the cold restart's 7.5
    assert "| 100 | 1,010 | 1.60 [1.50, 1.70] | 2.40 [2.30, 2.50] | 40.0 [40.0, 40.0] | " \
           "15.0 [14.0, 16.0] | 7.5 [7.0, 8.0] | 0.11 | 0.21 | met | met |" in text
    assert "- backlog 100: failover first batch median 1.60 s (target <= 2 s): **met**; " \
           "first batch with new data median 2.40 s (target <= 2.5 s): **met**" in text
    assert "- backlog 1,000: failover first batch median 2.60 s (target <= 2 s): " \
           "**missed**; first batch with new data median 3.40 s (target <= 2.5 s): " \
           "**missed**" in text
    assert "### The standby's steady cost" in text
    assert "| 0.10 [0.10, 0.10] |" in text and "| 900 [900, 900] |" in text
    assert "| **Standby cost** |" in text and "| **Failover (c)** |" in text


def test_a_failover_without_a_figure_misses_the_target() -> None:
    cells = _cells([math.nan])
    cells[("ours-ha", 100)].notes.append("not caught up in 150 s")
    text = render(cells, [100, 1000], CFG, FACTS, "full", [SESSION], 10.0, [])
    assert "- backlog 100: failover first batch median no figure (target <= 2 s): " \
           "**missed**; first batch with new data median no figure" in text
    assert "- ours-ha backlog 100: not caught up in 150 s" in text


def test_without_ours_ha_the_results_file_has_no_failover_part() -> None:
    cells = {k: c for k, c in _cells([1.5]).items() if k[0] != "ours-ha"}
    text = render(cells, [100, 1000], CFG, FACTS, "full", [SESSION], 10.0, [])
    # The line naming the command that made the file names this test's file.
    body = "\n".join(line for line in text.splitlines() if not line.startswith("Generated"))
    assert "ailover" not in body and "Standby" not in body and "standby" not in body
    out = cells_json(cells, CFG, [SESSION])
    assert all("steady" not in per for fig in out["cells"].values() for per in fig.values())


def test_the_steady_cost_goes_to_the_json_and_back(tmp_path: Path) -> None:
    cells = _cells([1.5, 1.6, math.nan])
    out = cells_json(cells, CFG, [SESSION])
    steady = out["cells"]["ours-ha"]["100"]["steady"]
    assert steady["standby_cpu"] == [0.1, 0.1, 0.1] and out["cells"]["ours-ha"]["100"][
        "first"] == [1.5, 1.6, None]
    assert out["cells"]["ours-ha"]["100"]["fresh"][:2] == pytest.approx([2.3, 2.4])
    assert out["cells"]["ours-ha"]["100"]["fresh"][2] is None
    assert "fresh" not in out["cells"]["ours"]["100"]
    path = tmp_path / "RESULTS-failover.json"
    path.write_text(json.dumps(out))
    earlier = load_earlier(path, compared(CFG), CPU, ["spark", "ours", "ours-ha"], [100, 1000])
    assert earlier is not None
    again = {(impl, b): Cell() for impl in ("spark", "ours", "ours-ha") for b in (100, 1000)}
    prefill(again, earlier)
    assert again[("ours-ha", 100)].steady["leader_rss_mib"] == [1100.0] * 3
    assert failover_render.verdict(again[("ours-ha", 100)]) == "met"
    assert failover_render.fresh_verdict(again[("ours-ha", 100)]) == "met"  # 2.35 s


def test_ours_ha_with_several_kills_is_refused_before_measuring(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:  # no broker, no app: refused at once
        main(["--backlogs", "100", "--kills", "2", "--impls", "ours-ha"])
    assert exc.value.code == 2
    assert "ours-ha" in capsys.readouterr().err
