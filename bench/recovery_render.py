"""The recovery benchmark's results file and plots (``bench.recovery_bench``).

Every figure comes from the cells the benchmark measured (``recovery_runs.Cell``);
nothing here measures.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import failover_render
from bench.common import Stat, finish_plot, md_facts, md_table, pyplot, with_gaps
from bench.peer_apps import impl_label
from bench.recovery_runs import (
    RATE,
    SETTLE_S,
    Cell,
    app_master,
    kills_per_run,
    sessions_line,
)


def _jvm_line() -> str:
    """How each side's driver JVM starts: (b) maps walstream's class archive when
    one exists (walstream/jvm_archive.py); (a) starts as Spark ships it."""
    from walstream.jvm_archive import ENV_SWITCH, switched_off, usable_archive

    path = None if switched_off() else usable_archive()
    if switched_off():
        ours = f"class archive switched off ({ENV_SWITCH}=off)"
    elif path is None:
        ours = "no class archive (none written)"
    else:
        ours = (f"maps the class archive `{path.name}` ({path.stat().st_size / 2**20:.0f} "
                "MiB, `walstream jvm-archive`)")
    return f"(a) as Spark ships it; (b) {ours}"


def _label(impl: str) -> str:
    return failover_render.LABEL if impl == failover_render.IMPL else impl_label(impl)


def _fmt(values: list[float], digits: int = 1) -> str:
    ok = [v for v in values if v == v]
    return Stat.of(ok).fmt(digits) if ok else "n/a"


def _median(values: list[float]) -> float:
    ok = [v for v in values if v == v]
    return statistics.median(ok) if ok else float("nan")


def _count(values: list[int]) -> str:
    return f"{statistics.median(values):,.0f}" if values else "n/a"


def plot(cells: dict[tuple[str, int], Cell], backlogs: list[int], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for impl in ("spark", "ours", failover_render.IMPL):
        if not all((impl, b) in cells and cells[(impl, b)].blocks for b in backlogs):
            continue  # not run (--impls)
        xs = [statistics.median(cells[(impl, b)].blocks) for b in backlogs]
        since = " (from the SIGKILL)" if impl == failover_render.IMPL else ""
        for key, style in (("first", "-o"), ("caught", "--s")):
            ys = [_median(getattr(cells[(impl, b)], key)) for b in backlogs]
            what = "first batch" if key == "first" else "caught up"
            ax.plot(xs, ys, style, label=f"{_label(impl)}: {what}{since}")
    return finish_plot(plt, fig, ax, path, log_x=True,
                       title="Driver SIGKILL, restart with getOrCreate (medians)",
                       xlabel="backlog at the SIGKILL (blocks)",
                       ylabel="seconds from the restart command")


def plot_kill(cells: dict[tuple[str, int], Cell], backlog: int, path: Path) -> bool:
    """Words counted per completed batch against seconds from the SIGKILL, both systems."""
    plt = pyplot()
    if plt is None:
        return False
    examples = [c.example for (_, b), c in sorted(cells.items()) if b == backlog and c.example]
    if not examples:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in examples:
        xs, ys = with_gaps([(w - r.kill_wall, float(n)) for w, n in r.timeline
                            if w - r.kill_wall >= -40], gap=3.0)
        how = ("no restart: the standby takes over" if r.impl == failover_render.IMPL
               else f"restart command at +{r.restart_wall - r.kill_wall:.1f} s")
        ax.plot(xs, ys, ".-", markersize=3, label=f"{_label(r.impl)} ({how})")
    ax.axvline(0, color="red", linestyle="--", linewidth=0.8, label="SIGKILL")
    return finish_plot(plt, fig, ax, path,
                       title=f"Around a driver SIGKILL at a backlog of ~{backlog:,} blocks",
                       xlabel="seconds from the SIGKILL (batch completion time)",
                       ylabel="words counted by the completed batch")


def _runs_said(sessions: list[dict[str, Any]], elapsed: float) -> str:
    now = int(sessions[-1]["runs"])
    total = sum(int(s["runs"]) for s in sessions)
    if total == now:
        return f"{now} run(s), {elapsed:.0f} s in all"
    return (f"{total} runs: {now} now ({elapsed:.0f} s), {total - now} from earlier "
            "invocations on this CPU (`--append`)")


def _master(cfg: dict[str, Any]) -> str:
    return (f"{app_master(int(cfg['receivers']))} (two task slots beside the "
            "receivers), also on restart (Spark: `--master` in `PYSPARK_SUBMIT_ARGS`, as "
            "`spark-submit --master` gives it; walstream keeps its checkpoint's)")


def _receivers_line(cfg: dict[str, Any]) -> str:
    r = int(cfg["receivers"])
    if r == 1:
        return "one socketTextStream"
    return (f"{r} socketTextStreams unioned, each from its own line server; the history "
            f"feeds the first only (one block per interval, as with one receiver), the "
            f"backlog all {r} ({RATE:.0f} lines/s split evenly: {r} blocks per interval). "
            "Shuffles keep 3 partitions (`spark.default.parallelism`)")


def _kills_fact(cells: dict[tuple[str, int], Cell], cfg: dict[str, Any]) -> dict[str, str]:
    """The Kills line of the configuration: none for one kill per run."""
    kills = kills_per_run(cfg)
    if kills == 1:
        return {}
    ran = "; ".join(f"{impl} {', '.join(f'{s / 60:.1f}' for s in c.ran)}"
                    for (impl, _), c in sorted(cells.items()) if c.ran)
    return {"Kills": f"{kills} per run (step 5): after each restart caught up, the app ran "
                     f"{SETTLE_S:.0f} s more at {RATE:.0f} lines/s, then the same backlog and "
                     f"SIGKILL again; every kill is one measurement in the cells. Minutes "
                     f"of running at each kill: {ran}"}


def render(cells: dict[tuple[str, int], Cell], backlogs: list[int], cfg: dict[str, Any],
           facts: dict[str, str], size: str, sessions: list[dict[str, Any]], elapsed: float,
           plots: list[tuple[str, str]]) -> str:
    rows = []
    verdicts = []
    failover = failover_render.has_failover(cells)
    for b in backlogs:
        a, o = cells[("spark", b)], cells[("ours", b)]
        ratio = _median(o.first) / _median(a.first)
        exact = f" (exact {_count(o.exact)})" if o.exact else ""
        rows.append([f"{b:,}", f"{_count(a.blocks)} / {_count(o.blocks)}{exact}",
                     _fmt(a.first), _fmt(o.first), f"{ratio:.2f}",
                     _fmt(a.caught), _fmt(o.caught)])
        if ratio == ratio:
            verdicts.append(f"- backlog {b:,}: first batch (b)/(a) = **{ratio:.2f}** "
                            f"(target <= 0.5): **{'met' if ratio <= 0.5 else 'missed'}**")
        if a.blocks and o.blocks and \
                statistics.median(a.blocks) > 1.2 * statistics.median(o.blocks):
            verdicts.append(
                f"  (a) had more to redo at backlog {b:,}: it had fallen behind during the "
                "history (its last completed batch was older at the kill), so its caught-up "
                "time is not comparable one to one; the first-batch times are.")
    notes = [f"- {impl} backlog {b}: {n}" for (impl, b), c in cells.items() for n in c.notes]
    if len(sessions) > 1:
        facts = {**facts, "Runs pooled": sessions_line(sessions)}
    lines = [
        "# Recovery benchmark: driver SIGKILL and getOrCreate, against backlog"
        + (", and a hot standby's failover" if failover else ""), "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        f"`python -m bench.recovery_bench {' '.join(sys.argv[1:]) or f'--size {size}'}` "
        f"({_runs_said(sessions, elapsed)}). Cells: **median [min, max]** seconds from the "
        "restart command.", "",
        "## Machine", "", md_facts(facts), "",
        "## Configuration", "",
        md_facts({
            "App": "`bench/peer_app.py` (the peer benchmark's word count) with "
                   "`StreamingContext.getOrCreate`; (a) pyspark.streaming with the receiver "
                   "WAL, (b) walstream",
            "Spark": f"{_master(cfg)}, batch {1} s, block interval {cfg['block_ms']} ms, "
                     "checkpoint directory on local disk",
            "Receivers": _receivers_line(cfg),
            "Driver JVM": _jvm_line(),
            "History": f"{cfg['history_s']:.0f} s at {RATE:.0f} lines/s before the backlog",
            **_kills_fact(cells, cfg),
            "Backlog": "the output operation waits (slow sink) while lines flow on for "
                       f"backlog x {cfg['block_ms']} ms / receivers; then SIGKILL of the "
                       "app's process group",
            "Backlog blocks": f"for both: {cfg['block_ms']} ms block intervals (each with "
                              "data) "
                              "from the last completed batch to the kill; for (b) also "
                              "the exact count in the tracker state the restart begins "
                              "with (unallocated blocks and those of unfinished batches)",
            "First batch": "restart command -> first batch completed by the new process",
            "Caught up": "restart command -> first completed batch whose time is after "
                         "the restart (the whole backlog processed)",
            **(failover_render.config_facts(cfg) if failover else {}),
        }), "",
        "## Results", "",
        md_table(["Backlog (blocks)", "Blocks (a) / (b)", "(a) Spark first batch (s)",
                  "(b) walstream first batch (s)", "(b)/(a)", "(a) Spark caught up (s)",
                  "(b) walstream caught up (s)"], rows), "",
        *verdicts, "",
        *(failover_render.section(cells, backlogs) if failover else []),
    ]
    for alt, name in plots:
        lines += [f"![{alt}]({name})", ""]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    return "\n".join(lines)
