"""Combine the benchmarks' result files into ``bench/RESULTS.md``.

``python -m bench.report`` (the last step of ``make bench``): the machine, every
target line of every ``RESULTS-*.md`` (met or missed, with its figure) in one
table, then each file in full, so one page holds every table and plot. Nothing is
measured here; a missing file is listed as not run.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import (
    finish_plot,
    machine_info,
    md_facts,
    md_table,
    pyplot,
    write_results,
)
from bench.recovery_runs import PLAIN_LAUNCH, kills_per_run, newest_session, provenance

HERE = Path(__file__).resolve().parent
#: (file, title) in the issue's order.
PARTS = [
    ("RESULTS-ingest.md", "1. Ingest ceiling vs raw Kafka"),
    ("RESULTS-peer.md", "2. Peer: Spark's own receiver WAL"),
    ("RESULTS-recovery.md", "3. Recovery time against backlog"),
    ("RESULTS-recovery-lookahead.md",
     "3. Recovery at 10^3 blocks, one-batch-ahead job building"),
    ("RESULTS-preload-after.md",
     "3. Recovery at 10^3 blocks, workers forked from the preloading daemon (walstream only)"),
    ("RESULTS-recovery-large.md", "3a. Recovery at a backlog of 10^4 blocks"),
    ("RESULTS-preload-after-large.md",
     "3a. Recovery at 10^4 blocks, workers forked from the preloading daemon (walstream only)"),
    ("RESULTS-recovery-huge.md", "3a. Recovery at a backlog of 10^5 blocks"),
    ("RESULTS-recovery-kills.md", "3b. Recovery after 1 minute of running, 3 kills per run"),
    ("RESULTS-recovery-history.md", "3b. Recovery after 30 minutes of running"),
    ("RESULTS-recovery-history-same-session.md",
     "3b. Recovery after 30 minutes of running, walstream only, one session"),
    ("RESULTS-addblock.md", "4. Driver WAL: AddBlock"),
    ("RESULTS-soak.md", "5. Soak: memory over 30 minutes, recovery after it"),
    ("RESULTS-wal.md", "WAL write throughput vs raw produce"),
]
VERDICT = re.compile(r"\*\*(met|missed)\*\*")


def verdicts(text: str) -> list[tuple[str, str]]:
    """(line without the verdict, met|missed) for every target line of a results file."""
    out = []
    for line in text.splitlines():
        m = VERDICT.search(line)
        if m:
            what = line.lstrip("-| ").replace("**", "").strip()
            out.append((what, m.group(1)))
    return out


#: Results of the recovery benchmark at the same backlog after a short and a long
#: history (``recovery_bench`` writes a .json beside each .md).
RUN_LENGTH = ("RESULTS-recovery.json", "RESULTS-recovery-history.json")
#: Other short-history files at the same backlog: the comparison takes, of these
#: and RUN_LENGTH's first, one measured on the long history's CPU, preferring the
#: long one's kills per run (RESULTS-recovery-kills: 1 min, 3 kills), then the newest.
RUN_LENGTH_SHORT = ("RESULTS-recovery-lookahead.json", "RESULTS-recovery-kills.json")
RUN_LENGTH_BACKLOG = "1000"
RUN_LENGTH_AFTER = "RESULTS-recovery-history.md"  # the part the comparison follows
#: "Flat in run length": the first batch after the long history within this factor
#: of the first batch after the short one (one run's spread at 10^3 blocks is ~10%).
FLAT = 1.2


def _med(values: list[float | None]) -> float:
    ok = [v for v in values if v is not None]
    return statistics.median(ok) if ok else float("nan")


def _span(values: list[float | None]) -> str:
    ok = [v for v in values if v is not None]
    if not ok:
        return "n/a"
    return f"{statistics.median(ok):.1f} [{min(ok):.1f}, {max(ok):.1f}]"




def _kills(path: Path) -> int:
    return kills_per_run(json.loads(path.read_text()) if path.exists() else {})


def _run_length_files() -> list[Path]:
    """The short-history file to set beside the long one: one measured on the long
    one's CPU (a ratio across machines says nothing), else RUN_LENGTH's. Of those,
    one with the long run's kills per run first: with ``--kills`` the later kills
    of a run come after earlier restarts of the same app, so only the same count
    on both sides leaves the history as the one difference. Then the newest."""
    short, long = (HERE / name for name in RUN_LENGTH)
    cpu, kills = provenance(long).get("CPU"), _kills(long)
    same = [p for p in (short, *(HERE / n for n in RUN_LENGTH_SHORT))
            if p.exists() and provenance(p).get("CPU") == cpu]
    if not same:
        return [short, long]
    return [max(same, key=lambda p: (_kills(p) == kills, newest_session(p))), long]


def run_length(files: Sequence[Path] | None = None,
               backlog: str = RUN_LENGTH_BACKLOG) -> list[str]:
    """Markdown lines: first batch and caught up at one backlog after each history,
    both systems, and the verdict on ours being flat in run length (none when a
    file is missing)."""
    runs = []
    for path in files or _run_length_files():
        if not path.exists():
            return []
        data = json.loads(path.read_text())
        cells = data["cells"]
        if backlog not in cells.get("ours", {}) or backlog not in cells.get("spark", {}):
            return []
        runs.append((path, data, cells["spark"][backlog], cells["ours"][backlog],
                     provenance(path)))
    runs.sort(key=lambda r: float(r[1]["history_s"]))
    rows = []
    for path, data, a, o, facts in runs:
        ratio = _med(o["first"]) / _med(a["first"])
        kills = kills_per_run(data)
        rows.append([f"{float(data['history_s']) / 60:.0f} min", f"[{path.stem}]({path.stem}.md)",
                     str(len(o["first"])) + (f" ({kills} kills per run)" if kills > 1 else ""),
                     f"{facts.get('CPU', '?')}, {facts.get('Code', '?')}",
                     _span(a["first"]), _span(o["first"]),
                     f"{ratio:.2f}", _span(a["caught"]), _span(o["caught"])])
    (_, _, a0, o0, short_facts), (_, long_run, a1, o1, long_facts) = runs[0], runs[-1]
    ours, spark = _med(o1["first"]) / _med(o0["first"]), _med(a1["first"]) / _med(a0["first"])
    minutes = float(long_run["history_s"]) / 60
    table = md_table(["History", "File", "Restarts measured", "Measured on (CPU, code)",
                      "(a) Spark first batch (s)", "(b) walstream first batch (s)", "(b)/(a)",
                      "(a) Spark caught up (s)", "(b) walstream caught up (s)"], rows)
    what = (f"walstream's first batch after {minutes:.0f} min / after "
            f"{float(runs[0][1]['history_s']) / 60:.0f} min of history, backlog "
            f"{int(backlog):,} blocks")
    if short_facts.get("CPU") != long_facts.get("CPU"):
        # A ratio of times from two machines says nothing about run length: no verdict.
        return [table, "", f"- {what}: {ours:.2f}, not comparable: the two were measured "
                           "on different machines (re-run one of them)"]
    masters = [str(r[1].get("spark_restart_master", PLAIN_LAUNCH)) for r in (runs[0], runs[-1])]
    spark_part = f"Spark's: {spark:.2f}"
    if masters[0] != masters[1]:
        # Spark recovered with a different number of task slots: its ratio measures that.
        spark_part += (f" (not comparable: Spark recovered on {masters[0]} after the short "
                       f"history, on {masters[1]} after the long one)")
    return [table, "",
            f"- {what}: **{ours:.2f}** (target: flat, within {FLAT}x): "
            f"**{'met' if ours <= FLAT else 'missed'}**; {spark_part}"]


#: Every recovery-against-backlog result, for one plot from 10^2 to 10^5 blocks.
BACKLOG_FILES = ("RESULTS-recovery.json", "RESULTS-recovery-lookahead.json",
                 "RESULTS-recovery-large.json", "RESULTS-recovery-huge.json")
BACKLOG_PLOT = "recovery-all-backlogs.png"

Series = tuple[str, int, str]  # (system, receivers, CPU)


def _cpu_kind(json_path: Path) -> str:
    """The CPU model of a results file (``2 cores, AMD EPYC`` -> ``AMD EPYC``)."""
    return provenance(json_path).get("CPU", "?").split(", ", 1)[-1]


def backlog_points(files: Sequence[Path]) -> dict[Series, list[tuple[float, float]]]:
    """(system, receivers, CPU) -> [(median blocks, median first batch s)], from every
    file that exists, at every backlog each one measured. The CPU is part of the key:
    the sessions ran on two CPU kinds, and a line must not join points from both."""
    points: dict[Series, list[tuple[float, float]]] = {}
    for path in files:
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        receivers = int(data.get("receivers", 1))
        cpu = _cpu_kind(path)
        for impl, cells in data["cells"].items():
            for cell in cells.values():
                first = _med(cell["first"])
                if cell["blocks"] and first == first:
                    points.setdefault((impl, receivers, cpu), []).append(
                        (statistics.median(cell["blocks"]), first))
    return {k: sorted(v) for k, v in points.items()}


def plot_backlogs(points: dict[Series, list[tuple[float, float]]], path: Path) -> bool:
    """First batch after the restart against the backlog, both systems, one line per
    receiver count (a large backlog is built with more receivers) and CPU kind."""
    plt = pyplot()
    if plt is None or not points:
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5))
    markers = {cpu: m for m, cpu in zip("osD^v", sorted({k[2] for k in points}), strict=False)}
    for (impl, receivers, cpu), xy in sorted(points.items()):
        name = "Spark receiver WAL" if impl == "spark" else "walstream"
        ax.plot([x for x, _ in xy], [y for _, y in xy],
                ("-" if receivers == 1 else ":") + markers.get(cpu, "o"),
                color="tab:blue" if impl == "ours" else "tab:orange",
                label=f"{name}, {receivers} receiver(s), {cpu}")
    ax.set_ylim(bottom=0)
    return finish_plot(plt, fig, ax, path, log_x=True,
                       title="Recovery against backlog (medians; see each results file for runs)",
                       xlabel="backlog at the SIGKILL (blocks)",
                       ylabel="restart command -> first completed batch (s)")


def restart_caveat(json_path: Path) -> str:
    """What a recovery file's Spark ratio must be read with: empty unless Spark
    recovered on a plain launch's master (runs before the benchmark gave it one)."""
    if not json_path.exists():
        return ""
    data = json.loads(json_path.read_text())
    if not isinstance(data.get("cells"), dict) or not data["cells"].get("spark"):
        return ""  # Spark did not recover here (the soak restarts walstream only)
    if data.get("spark_restart_master", PLAIN_LAUNCH) != PLAIN_LAUNCH:
        return ""
    return (f" (Spark recovered on {PLAIN_LAUNCH}, one task slot fewer than walstream: "
            "its times are too slow; re-run)")


def _demote(text: str) -> str:
    """Headings one level down, so each file nests under its section."""
    return "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())


def render(facts: dict[str, str]) -> str:
    rows: list[list[str]] = []
    sections: list[str] = []
    for name, title in PARTS:
        path = HERE / name
        if not path.exists():
            rows.append([title, "not run", ""])
            continue
        text = path.read_text()
        caveat = restart_caveat(path.with_suffix(".json"))
        for what, verdict in verdicts(text) or [("(no target line)", "")]:
            rows.append([f"[{title}]({name})", what + caveat, verdict])
        sections += [f"## {title}", "", _demote(text), ""]
        flat = run_length() if name == RUN_LENGTH_AFTER else []
        if flat:
            found = verdicts(flat[-1])
            rows.append(["[3b. Recovery against run length](#recovery-against-run-length)",
                         *(found[0] if found else (flat[-1].lstrip("- "), "n/a"))])
            sections += ["## Recovery against run length", "",
                         "The same backlog after a short and a long history, both systems "
                         "(from the recovery benchmark's .json files):", "", *flat, ""]
    if plot_backlogs(backlog_points([HERE / f for f in BACKLOG_FILES]), HERE / BACKLOG_PLOT):
        sections += ["## Recovery against backlog, every file", "",
                     f"![first batch after the restart against backlog]({BACKLOG_PLOT})", ""]
    return "\n".join([
        "# Benchmark results", "",
        f"Assembled {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        "`python -m bench.report` from the files below; each was measured side by side "
        "with its reference in one run on this machine (its own header gives the date, "
        "the exact command and the load).", "",
        "## Machine", "", md_facts(facts), "",
        "## Targets", "",
        md_table(["Benchmark", "Target line (figure)", "Verdict"], rows), "",
        *sections,
    ])


def main() -> int:
    write_results(HERE / "RESULTS.md", render(machine_info("see each benchmark")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
