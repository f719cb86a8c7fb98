"""Summarise the benchmarks' result files in ``bench/RESULTS.md``.

``python -m bench.report`` (the last step of ``make bench``) reads the detailed
results under ``bench/results/`` and writes a page a person reads in two minutes:
one table with every target line of every ``RESULTS-*.md`` (the target, the figure,
met or missed, the machine it was measured on and a link to the file), the machines,
and how to reproduce. Beside the results it writes the run-length comparison
(``results/RESULTS-run-length.md``) and one plot of recovery at every backlog. Nothing
is measured here; a missing file is listed as not run.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import finish_plot, md_facts, md_table, pyplot, write_results
from bench.recovery_runs import PLAIN_LAUNCH, kills_per_run, newest_session, provenance

HERE = Path(__file__).resolve().parent
#: The detailed results: every benchmark writes its files here (``make bench``).
RESULTS = HERE / "results"
SUMMARY = HERE / "RESULTS.md"
#: Decisions resting on benchmark runs that are no longer in the tree (git history).
DECISIONS = HERE.parent / "docs" / "decisions"
#: The run-length comparison, written beside the results it reads.
RUN_LENGTH_FILE = "RESULTS-run-length.md"


#: (file under results/, benchmark, target) in the issue's order. A target of None:
#: measured for reference, no target.
PARTS: list[tuple[str, str, str | None]] = [
    ("RESULTS-peer.md", "Peer: word count vs `pyspark.streaming` with its receiver WAL",
     ">= 2x throughput, lower p99; >= 0.8x of the floor, p99 <= 1.5 s at half rate"),
    ("RESULTS-peer-100b-ours.md", "Peer: walstream alone against the floor, 100 B lines "
     "(a later run than the comparison above)",
     ">= 0.8x of the floor, p99 <= 1.5 s at half rate"),
    ("RESULTS-peer-10k.md", "Peer: the same word count with 10 KB lines",
     ">= 0.8x of the floor by MB/s"),
    ("RESULTS-recovery.md", "Recovery after a driver SIGKILL, 10^2 and 10^3 blocks",
     "first batch <= 0.5x Spark's"),
    ("RESULTS-recovery-large.md", "Recovery, 10^4 blocks (ten receivers)",
     "first batch <= 0.5x Spark's"),
    ("RESULTS-recovery-huge.md", "Recovery, 10^5 blocks (ten receivers)",
     "first batch <= 0.5x Spark's"),
    ("RESULTS-recovery-kills.md", "Recovery after 1 minute of running, 3 kills per run",
     "first batch <= 0.5x Spark's"),
    ("RESULTS-recovery-history.md", "Recovery after 30 minutes of running, 3 kills per run",
     "first batch <= 0.5x Spark's"),
    (RUN_LENGTH_FILE, "Recovery against run length (walstream)",
     "flat: within 1.2x of after 1 minute"),
    ("RESULTS-failover.md", "Failover to a hot standby, 10^2-10^4 blocks (ten receivers)",
     "first batch <= 2 s after the leader's SIGKILL"),
    ("RESULTS-ingest.md", "Ingest: Kafka source -> receiver WAL -> reported",
     ">= 0.7x raw produce; 1 receiver at 100 B >= 0.8x of the bare consumer's read"),
    ("RESULTS-soak.md", "Soak: RSS over 30 minutes at half the sustained rate",
     "growth < 10%"),
    ("RESULTS-structured.md", "Structured Streaming: word count through walstream's "
     "source vs Spark's socket source", None),
    ("RESULTS-addblock.md", "AddBlock through the driver's gRPC endpoint, 8/32/128 reporters",
     None),
    ("RESULTS-wal.md", "WAL write throughput vs raw produce", None),
]
VERDICT = re.compile(r"\*\*(met|missed)\*\*")
#: Files that also hold another benchmark's target lines: only the lines with this
#: text are theirs (the failover file repeats the cold restarts' ratio lines).
OWN_LINES = {"RESULTS-failover.md": "failover first batch"}
#: Files with no target whose figure lines (lines with this text) the summary shows.
FIGURE_LINES = {"RESULTS-structured.md": "Sustained throughput (b)/(a)"}


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
RUN_LENGTH_SHORT = ("RESULTS-recovery-kills.json",)
RUN_LENGTH_BACKLOG = "1000"
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
    short, long = (RESULTS / name for name in RUN_LENGTH)
    cpu, kills = provenance(long).get("CPU"), _kills(long)
    same = [p for p in (short, *(RESULTS / n for n in RUN_LENGTH_SHORT))
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
BACKLOG_FILES = ("RESULTS-recovery.json", "RESULTS-recovery-large.json",
                 "RESULTS-recovery-huge.json")
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


#: A target line: ``<figure> (target <target>[; <note>]): met`` (or ``-> missed``).
_TARGET = re.compile(r"\s*\(target:?\s*([^;)]*)(?:;\s*([^)]*))?\)")
_VERDICT_AFTER = re.compile(r"^\s*(?::|->)\s*(?:met|missed)\b")


def figure(what: str) -> str:
    """A target line's figure: the line without its ``(target ...)`` and verdict
    (kept: a note inside the parenthesis and anything after the verdict)."""
    m = _TARGET.search(what)
    if not m:
        return what
    note = f" ({m.group(2).strip()})" if m.group(2) else ""
    return (what[:m.start()] + note + _VERDICT_AFTER.sub("", what[m.end():])).strip()


def measured_on(md_path: Path) -> str:
    """``AMD EPYC, git 5d01172``: the CPU kind and code a results file names."""
    facts = provenance(md_path.with_suffix(".json"))
    cpu = facts.get("CPU", "?").split(", ", 1)[-1]
    return f"{cpu}, {facts.get('Code', '?')}"


_FACTS = re.compile(r"^\| \*\*([^*]+)\*\* \| (.*) \|$", re.M)
#: The machine facts the summary lists (every results file has them, in its header).
MACHINE_KEYS = ("CPU", "Memory", "Python", "Java", "confluent-kafka / librdkafka")


def machines(paths: Sequence[Path]) -> str:
    """One row per machine the results files were measured on, naming its files."""
    seen: dict[tuple[str, ...], list[str]] = {}
    for path in paths:
        if path.exists():
            facts = dict(_FACTS.findall(path.read_text()))
            key = tuple(facts.get(k, "?") for k in MACHINE_KEYS)
            seen.setdefault(key, []).append(f"[{path.stem}](results/{path.name})")
    return md_table([*MACHINE_KEYS, "Results"],
                    [[*key, ", ".join(files)] for key, files in seen.items()])


def decisions(folder: Path) -> list[str]:
    """Markdown links to the decision records that cite a benchmark result."""
    out = []
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        text = path.read_text()
        if "bench/" in text:
            title = next((line.lstrip("# ") for line in text.splitlines()
                          if line.startswith("# ")), path.stem)
            out.append(f"- [{title}](../docs/decisions/{path.name})")
    return out


def run_length_page(files: Sequence[Path], lines: list[str]) -> str:
    """The run-length comparison's own results file: the machine and code of the files
    it compares (as every results file names them), then the table and verdict."""
    facts = [provenance(path) for path in files]
    cpus = dict.fromkeys(f.get("CPU", "?") for f in facts)
    return "\n".join([
        "# Recovery against run length", "",
        "The same backlog after a short and a long history, both systems, from the "
        "recovery benchmark's .json files (`python -m bench.report`). The short history "
        "is one measured on the long one's CPU, with its kills per run when there is one.",
        "", md_facts({"CPU": " / ".join(cpus),
                      "Code": " / ".join(f.get("Code", "?") for f in facts)}),
        "", *lines])


def verdict_of(found: Sequence[str]) -> str:
    """One benchmark's verdict over its target lines: met or missed when they agree."""
    met = sum(v == "met" for v in found)
    if met in (0, len(found)):
        return found[0]
    return f"{met} met, {len(found) - met} missed"


def render() -> str:
    """bench/RESULTS.md: one row per results file (every target line of it, one per
    line of the cell), the machines, how to reproduce."""
    rows: list[list[str]] = []
    every: list[str] = []  # the verdict of every target line
    for name, title, target in PARTS:
        path = RESULTS / name
        if not path.exists():
            rows.append([title, target or "none", "not run", "", ""])
            continue
        link = f"[{title}](results/{name})"
        found = [(what, verdict) for what, verdict in verdicts(path.read_text())
                 if OWN_LINES.get(name, "") in what]
        if target is None or not found:
            shown = [line.strip("-* ").replace("**", "")
                     for line in path.read_text().splitlines()
                     if name in FIGURE_LINES and FIGURE_LINES[name] in line]
            rows.append([link, target or "none (reference figures)",
                         "<br>".join(shown) if shown else
                         "see the file" if target is None else "(no target line)",
                         "-", measured_on(path)])
            continue
        caveat = restart_caveat(path.with_suffix(".json"))
        every += [verdict for _, verdict in found]
        rows.append([link, target, "<br>".join(figure(what) + caveat for what, _ in found),
                     verdict_of([verdict for _, verdict in found]), measured_on(path)])
    measured = [RESULTS / name for name, _, _ in PARTS if name != RUN_LENGTH_FILE]
    cited = decisions(DECISIONS)
    return "\n".join([
        "# Benchmark results", "",
        "Each benchmark runs this project side by side with a reference (Spark's own "
        "receiver WAL, or raw Kafka produce) against one broker in one run, 3 runs or "
        "more, and reports median [min, max]; in a figure (a) is the reference and (b) "
        "walstream. This page is the summary; each row links to its file under "
        "[results/](results/), which gives the exact command, the machine, its load and "
        "every run. Ratios are only taken within one file.",
        "", "## Targets", "",
        f"{every.count('met')} of {len(every)} target lines met.", "",
        md_table(["Benchmark (details)", "Target", "Figure", "Verdict", "Measured on"],
                 rows), "",
        f"![first batch after the restart against backlog](results/{BACKLOG_PLOT})", "",
        "## Machines", "",
        "2-core machines, sometimes shared with other test runs (each file gives its "
        "load):", "",
        machines(measured), "",
        "## Reproduce", "",
        "- `make bench`: every benchmark at its full size (~9 hours on 2 cores), into "
        "`bench/results/`, then `python -m bench.report` writes this page.",
        "- `make bench-smoke`: every benchmark once at its small size (~20 minutes), into "
        "`build/bench-smoke/`: it shows they work on a machine; its numbers are not "
        "results.",
        "- One benchmark alone, and the options behind each file: "
        "[bench/README.md](README.md).",
        *(["", "## Decisions resting on earlier runs", "",
           "A/B runs that a change was decided on are not kept here; each record names "
           "the commit that holds them:", "", *cited] if cited else []),
    ])


def main() -> int:
    files = _run_length_files()
    flat = run_length(files)
    if flat:
        write_results(RESULTS / RUN_LENGTH_FILE, run_length_page(files, flat))
    else:  # a comparison of files no longer there would be stale
        (RESULTS / RUN_LENGTH_FILE).unlink(missing_ok=True)
    plot_backlogs(backlog_points([RESULTS / f for f in BACKLOG_FILES]), RESULTS / BACKLOG_PLOT)
    write_results(SUMMARY, render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
