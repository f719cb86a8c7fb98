"""The failover section of a recovery results file (``ours-ha``, ``bench.failover_bench``).

Every figure comes from the cells the benchmark filled (``recovery_runs.Cell``);
nothing here measures. The failover is timed from the SIGKILL, the cold restarts
from their restart command: the ratios therefore do not charge the restarts for
the time between the kill and the restart command, which favours the restarts.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from bench.common import Stat, md_table
from bench.failover_bench import STANDBY_SETTLE_S
from bench.recovery_runs import Cell

IMPL = "ours-ha"
#: The targets, at every backlog: the failover's median first batch at most TARGET_S,
#: and its median first batch with data sent after the kill at most FRESH_TARGET_S.
TARGET_S = 2.0
FRESH_TARGET_S = 2.5
LABEL = "(c) walstream hot standby (HA)"


def _ok(values: list[float]) -> list[float]:
    return [v for v in values if v == v]


def _fmt(values: list[float], digits: int = 1) -> str:
    ok = _ok(values)
    return Stat.of(ok).fmt(digits) if ok else "n/a"


def _median(values: list[float]) -> float:
    ok = _ok(values)
    return statistics.median(ok) if ok else float("nan")


def _ratio(num: float, den: float) -> str:
    return f"{num / den:.2f}" if num == num and den == den and den > 0 else "n/a"


def has_failover(cells: dict[tuple[str, int], Cell]) -> bool:
    """Whether ``ours-ha`` was asked for (its cells exist)."""
    return any(impl == IMPL for impl, _ in cells)


def verdict(cell: Cell) -> str:
    """``met`` or ``missed`` for one backlog (``missed`` also without a figure)."""
    m = _median(cell.first)
    return "met" if m == m and m <= TARGET_S else "missed"


def fresh_verdict(cell: Cell) -> str:
    """The same for the first batch with data sent after the kill."""
    m = _median(cell.fresh)
    return "met" if m == m and m <= FRESH_TARGET_S else "missed"


def config_facts(cfg: dict[str, Any]) -> dict[str, str]:
    """The configuration rows the failover adds to the results file."""
    return {
        "Failover (c)": "`bench/peer_app.py --impl ours-ha`: the same app with "
                        "`spark.walstream.ha.enabled=true` (lease timeout 1 s, renewal "
                        "every 200 ms: the defaults), started twice on a fresh checkpoint "
                        "directory per run (its own app id and lease topic); the second "
                        "process stands by once the first leads. Same history, backlog "
                        "and SIGKILL of the leader's process group; the standby is never "
                        f"restarted. The history starts {STANDBY_SETTLE_S:.0f} s after the "
                        "standby is ready (its workers' warm-up job runs in the background)",
        "Failover first batch": "SIGKILL -> first batch completed by the standby",
        "Failover new data": "SIGKILL -> first batch completed by the standby that counted "
                             "data sent after the SIGKILL (from the kill on, each line "
                             "server sends its new receiver lines marked as fresh)",
        "Failover caught up": "SIGKILL -> first batch completed by the standby whose time "
                              "is after the SIGKILL (the whole backlog processed)",
        "Standby cost": f"over the {cfg['history_s']:.0f} s history, the standby standing "
                        "by and the leader running: CPU = clock ticks (utime + stime, and "
                        "those of reaped children) of the Python driver, its JVM and its "
                        "Python workers (process group and descendants) per second of "
                        "wall clock, in cores; RSS = VmRSS summed over the same processes, "
                        "median of 1 s samples",
    }


def section(cells: dict[tuple[str, int], Cell], backlogs: list[int]) -> list[str]:
    """The failover table, the target verdicts and the steady-cost table."""
    rows, verdicts, cost_rows = [], [], []
    cores = os.cpu_count() or 1
    for b in backlogs:
        h = cells[(IMPL, b)]
        a, o = cells.get(("spark", b)), cells.get(("ours", b))
        mh = _median(h.first)
        ma = _median(a.first) if a is not None else float("nan")
        mo = _median(o.first) if o is not None else float("nan")
        blocks = f"{statistics.median(h.blocks):,.0f}" if h.blocks else "n/a"
        rows.append([f"{b:,}", blocks, _fmt(h.first, 2), _fmt(h.fresh, 2), _fmt(h.caught),
                     _fmt(a.first) if a is not None else "n/a",
                     _fmt(o.first) if o is not None else "n/a",
                     _ratio(mh, ma), _ratio(mh, mo), verdict(h), fresh_verdict(h)])
        said = f"{mh:.2f} s" if mh == mh else "no figure"
        mf = _median(h.fresh)
        said_fresh = f"{mf:.2f} s" if mf == mf else "no figure"
        verdicts.append(f"- backlog {b:,}: failover first batch median {said} (target <= "
                        f"{TARGET_S:.0f} s): **{verdict(h)}**; first batch with new data "
                        f"median {said_fresh} (target <= {FRESH_TARGET_S:.1f} s): "
                        f"**{fresh_verdict(h)}**")
        s = h.steady
        if s:
            cpu = s.get("standby_cpu", [])
            cost_rows.append([
                f"{b:,}", _fmt(cpu, 2),
                f"{100 * _median(cpu) / cores:.1f} %" if _ok(cpu) else "n/a",
                _fmt(s.get("standby_rss_mib", []), 0),
                _fmt(s.get("leader_cpu", []), 2), _fmt(s.get("leader_rss_mib", []), 0)])
    lines = [
        "## Failover: a hot standby takes over", "",
        "Failover cells: **median [min, max]** seconds from the SIGKILL of the leader; "
        "the restarts' first batch from their restart command (as above). Ratios: median "
        "over median.", "",
        md_table(["Backlog (blocks)", "Blocks (c)", f"{LABEL} first batch (s)",
                  "(c) first batch with new data (s)", "(c) caught up (s)",
                  "(a) Spark restart first batch (s)",
                  "(b) walstream restart first batch (s)", "(c)/(a)", "(c)/(b)",
                  f"first batch <= {TARGET_S:.0f} s",
                  f"new data <= {FRESH_TARGET_S:.1f} s"], rows), "",
        *verdicts, "",
    ]
    if cost_rows:
        lines += [
            "### The standby's steady cost", "",
            f"While standing by, over the history (median [min, max] of the runs; "
            f"% of machine = median cores / {cores} cores):", "",
            md_table(["Backlog (blocks) of the run", "Standby CPU (cores)",
                      "Standby CPU (% of machine)", "Standby RSS (MiB)",
                      "Leader CPU (cores), same interval", "Leader RSS (MiB)"], cost_rows),
            "",
        ]
    return lines
