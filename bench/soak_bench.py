"""Soak benchmark: memory over a long run, then recovery after that long history.

Usage (from the repo root)::

    python -m bench.soak_bench [--size small|full] [--rate LINES_PER_S] \
        [--out bench/results/RESULTS-soak.md]

This service's word count (``bench/peer_app.py``, ``--impl ours``: local[3], 1 s
batches, a 100 ms block interval) reads ``--rate`` lines/s (by default half of the
rate the peer benchmark found sustained here) for ``minutes`` minutes. Every
``SAMPLE_S`` seconds the resident memory (VmRSS) of each part is sampled: the
Python driver, its JVM, the sum of the Python workers (every other process in
the app's process group), and the embedded broker.

Growth is the mean of the last tenth of the samples over the mean of the first
minute after warm-up (``warmup_min``), minus one; the target is < 10% per part.

A JVM's RSS follows the heap G1 has committed, not the data it holds, so the JVM
is also watched from inside: its GC log is switched on in the running process
(``jcmd VM.log``) and the lowest heap a collection left each minute is reported
beside the RSS, and after the last sample a full GC gives the live heap and a
class histogram what it is made of. These explain the JVM's RSS; they are not
target lines.

At the end the soak becomes a recovery measurement (``bench.recovery_bench``
steps 2-4): a backlog of 1,000 blocks, SIGKILL, restart with getOrCreate, so its
restart time after the long history can be set beside the same backlog after one
minute (RESULTS-recovery.md): recovery must not grow with run length. The plot
shows memory over the run and lines/s per batch around the kill.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    Stat,
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    pyplot,
    with_gaps,
    write_results,
)
from bench.peer_apps import ROOT, App, LineServer, Phase
from bench.recovery_bench import measure
from bench.recovery_runs import BLOCK_MS, Recovery
from bench.soak_probe import (
    PARTS,
    heap_after_gc,
    jvm_after_full_gc,
    live_classes,
    sample,
    start_gc_log,
)

SIZES: dict[str, dict[str, Any]] = {
    "small": dict(minutes=3.0, warmup_min=1.0),
    "full": dict(minutes=30.0, warmup_min=5.0),
}
SAMPLE_S = 10.0
BACKLOG = 1000


@dataclass
class Soak:
    """One soak run: its samples, its batches around the kill, its JVM's insides."""

    rate: float
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    sent: int = 0
    achieved: float = 0.0
    batches: list[dict[str, Any]] = field(default_factory=list)
    recovery: Recovery | None = None
    kill_wall: float = 0.0
    jvm_gc: tuple[float, float] | None = None  # (RSS, live heap) MiB after a full GC at the end
    heap_after_gc: list[tuple[float, float]] = field(default_factory=list)  # (s, MiB) a minute
    live_classes: list[tuple[str, float, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Everything the report needs, so it can be redrawn without a 30-minute run."""
        d = dataclasses.asdict(self)
        d["batches"] = self.batches[-600:]
        if self.recovery is not None:
            d["recovery"]["timeline"] = []  # the batches above are the same data, kept once
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Soak:
        d = dict(d)
        rec = d.pop("recovery", None)
        soak = cls(**d)
        soak.samples = [(float(t), dict(s)) for t, s in soak.samples]
        soak.heap_after_gc = [(float(t), float(v)) for t, v in soak.heap_after_gc]
        soak.live_classes = [(str(c), float(m), int(n)) for c, m, n in soak.live_classes]
        if soak.jvm_gc is not None:
            soak.jvm_gc = (float(soak.jvm_gc[0]), float(soak.jvm_gc[1]))
        soak.recovery = Recovery(**rec) if rec is not None else None
        return soak


def growth(soak: Soak, part: str, warmup_s: float) -> tuple[float, float, float]:
    """(baseline MiB, end MiB, growth): first minute after warm-up vs the last tenth."""
    return series_growth([(t, s[part]) for t, s in soak.samples], warmup_s)


def series_growth(series: Sequence[tuple[float, float]],
                  warmup_s: float) -> tuple[float, float, float]:
    """``growth`` of any (seconds, MiB) series."""
    after = [(t, v) for t, v in series if t >= warmup_s]
    if len(after) < 4:
        raise ValueError("too few samples after warm-up")
    base = [v for t, v in after if t < warmup_s + 60] or [after[0][1]]
    tail = [v for _, v in after[-max(2, len(after) // 10):]]
    b, e = statistics.mean(base), statistics.mean(tail)
    return b, e, (e / b - 1) if b else float("nan")


def run(bootstrap: str, broker_pid: int, workdir: Path, cfg: dict[str, Any],
        rate: float) -> Soak:
    soak = Soak(rate)
    seconds = float(cfg["minutes"]) * 60

    gc_log = workdir / "jvm-gc.log"

    def history(app: App, server: LineServer) -> None:
        t0 = time.monotonic()
        first = Phase(rate)
        first.start = time.time()
        logging_gc = False
        while time.monotonic() - t0 < seconds:
            ph = Phase(rate)
            server.run_phase(ph, SAMPLE_S)
            soak.sent += ph.sent
            soak.samples.append((time.monotonic() - t0, sample(app.proc.pid, broker_pid)))
            logging_gc = logging_gc or start_gc_log(app.proc.pid, gc_log)
            if len(soak.samples) % 6 == 0:
                last = soak.samples[-1][1]
                log(f"soak {soak.samples[-1][0] / 60:.1f} min: " +
                    ", ".join(f"{k} {v:.0f} MiB" for k, v in last.items()))
        soak.achieved = soak.sent / max(1e-9, time.time() - first.start)
        soak.batches = app.batches()
        soak.heap_after_gc = heap_after_gc(gc_log, first.start)
        soak.jvm_gc = jvm_after_full_gc(app.proc.pid)
        soak.live_classes = live_classes(app.proc.pid)

    soak.recovery = measure("ours", bootstrap, workdir, BACKLOG, seconds, history)[0]
    outs = sorted(workdir.glob("ours-*.jsonl"))
    if outs:
        soak.batches = App.read_batches(outs[-1])
    return soak


def plot(soaks: Sequence[Soak], warmup_s: float, path: Path) -> bool:
    """Memory over the run, every run drawn (a colour per part, a line style per
    run), and lines per batch around the kill of the last run."""
    plt = pyplot()
    if plt is None or not soaks:
        return False
    last = soaks[-1]
    fig, axes = plt.subplots(2 if last.batches else 1, 1, figsize=(9, 7 if last.batches else 4),
                             squeeze=False)
    ax1 = axes[0][0]
    styles = ("-", "--", ":", "-.")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, soak in enumerate(soaks):
        xs = [t / 60 for t, _ in soak.samples]
        style = styles[n % len(styles)]
        for c, part in enumerate(PARTS):
            ax1.plot(xs, [s[part] for _, s in soak.samples], style, color=colours[c],
                     linewidth=1.0, label=part if n == 0 else None)
        if soak.heap_after_gc:
            ax1.plot([t / 60 for t, _ in soak.heap_after_gc],
                     [v for _, v in soak.heap_after_gc], style, color=colours[len(PARTS)],
                     linewidth=1.0,
                     label="JVM heap after GC (lowest a minute)" if n == 0 else None)
    ax1.axvline(warmup_s / 60, color="grey", linestyle=":", label="end of warm-up")
    ax1.set_xlabel("minutes")
    ax1.set_ylabel("RSS (MiB)")
    runs = f"{len(soaks)} runs (line style = run)" if len(soaks) > 1 else "one run"
    ax1.set_title(f"walstream word count at {last.rate:.0f} lines/s: resident memory, {runs}")
    ax1.legend(fontsize=8)
    if last.batches:
        ax2 = axes[1][0]
        tail_from = last.batches[-1]["wall"] - 240
        pts = [b for b in last.batches if b["wall"] >= tail_from]
        t_end = last.batches[-1]["wall"]
        ax2.plot(*with_gaps([(b["wall"] - t_end, float(b["records"])) for b in pts], gap=3.0),
                 ".-")
        ax2.set_xlabel("seconds before the last batch (completion time)")
        ax2.set_ylabel("lines per completed batch")
        ax2.set_title("Last run, around the kill: slow sink (backlog), SIGKILL, restart, "
                      "catch-up")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def memory_rows(soaks: Sequence[Soak], warmup_s: float) -> tuple[list[list[str]], list[str]]:
    """The memory table (medians over the runs) and one target line per part.

    The verdict is on the median growth, as every other benchmark's; the line also
    says how many runs met it, so one bad run is not hidden by the other two.
    """
    rows, verdicts = [], []
    for part in PARTS:
        if part == "broker" and not any(s[part] for soak in soaks for _, s in soak.samples):
            continue
        per_run = [growth(soak, part, warmup_s) for soak in soaks]
        g = Stat.of([x[2] * 100 for x in per_run])
        peak = max(s[part] for soak in soaks for _, s in soak.samples)
        rows.append([part, f"{statistics.median(x[0] for x in per_run):.0f}",
                     f"{statistics.median(x[1] for x in per_run):.0f}", f"{peak:.0f}",
                     f"{g.median:+.1f}% [{g.min:+.1f}%, {g.max:+.1f}%]"])
        met_runs = sum(x[2] < 0.10 for x in per_run)
        verdicts.append(f"- {part}: {g.median:+.1f}% [{g.min:+.1f}%, {g.max:+.1f}%] "
                        f"(target < 10%; {met_runs} of {len(soaks)} runs under it): "
                        f"**{'met' if g.median < 10 else 'missed'}**")
    return rows, verdicts


def jvm_lines(soaks: Sequence[Soak], warmup_s: float) -> list[str]:
    """What the JVM's RSS is made of: RSS and live heap after a full GC, the heap a
    GC left over the run, the largest live classes (of the last run)."""
    lines: list[str] = []
    after_full = [s.jvm_gc for s in soaks if s.jvm_gc is not None]
    if after_full:
        rss = Stat.of([a[0] for a in after_full])
        live = Stat.of([a[1] for a in after_full])
        lines += [f"Driver JVM after a full GC forced (`jcmd GC.run`) after the last sample "
                  f"({_runs(len(after_full))}): RSS **{rss.fmt(0)} MiB**, live heap "
                  f"**{live.fmt(0)} MiB** (max heap: spark.driver.memory). A JVM's RSS "
                  "follows its committed heap, which grows while garbage waits and shrinks "
                  "only after a full collection: a leak shows as live heap growing, not as "
                  "RSS alone.", ""]
    heap = [series_growth(s.heap_after_gc, warmup_s) for s in soaks
            if len([t for t, _ in s.heap_after_gc if t >= warmup_s]) >= 4]
    if heap:
        lines += [f"Driver JVM heap after a collection (from its GC log, switched on with "
                  f"`jcmd VM.log` at the first sample; the lowest figure a GC pause left in "
                  f"each minute, a ceiling on the live heap; {_runs(len(heap))}): "
                  f"**{Stat.of([h[0] for h in heap]).fmt(0)} MiB** in the first minute after "
                  f"warm-up, **{Stat.of([h[1] for h in heap]).fmt(0)} MiB** at the end "
                  f"({Stat.of([h[2] * 100 for h in heap]).fmt(1)}%). Not a target line: the "
                  "target is on RSS; this tells live data growing (a leak) from heap that G1 "
                  "committed and keeps.", ""]
    if soaks[-1].live_classes:
        lines += ["Largest classes on the live heap at the end of the last run "
                  "(`jcmd GC.class_histogram`, after the last sample):", "",
                  md_table(["Class", "MiB", "Instances"],
                           [[f"`{c}`", f"{mib:.1f}", f"{n:,}"]
                            for c, mib, n in soaks[-1].live_classes]), ""]
    return lines


def recovery_lines(soaks: Sequence[Soak], minutes: float) -> list[str]:
    recs = [s.recovery for s in soaks if s.recovery is not None]
    if not recs:
        return []
    first = Stat.of([r.first_batch_s for r in recs])
    caught = [r.caught_up_s for r in recs if r.caught_up_s == r.caught_up_s]
    backlogs = ", ".join(f"{r.nominal_blocks:,} (exact {r.exact_blocks})" for r in recs)
    notes = " ".join(sorted({r.note for r in recs if r.note}))
    return [
        "## Recovery after the long history", "",
        f"Backlog per run: {backlogs} blocks, after {minutes:.0f} min. First batch "
        f"**{first.fmt()} s** after the restart command"
        + (f", caught up after **{Stat.of(caught).fmt()} s**" if caught else
           ", never caught up within the timeout")
        + f" ({_runs(len(recs))}; batches re-run: "
        f"{', '.join(str(r.batches_rerun) for r in recs)}). {notes} Compare with the same "
        "backlog after one minute in [RESULTS-recovery.md](RESULTS-recovery.md).", ""]


def render(soaks: Sequence[Soak], cfg: dict[str, Any], facts: dict[str, str], size: str,
           elapsed: float, plotted: str | None) -> str:
    warmup_s = float(cfg["warmup_min"]) * 60
    rows, verdicts = memory_rows(soaks, warmup_s)
    rate = soaks[0].rate
    sent = Stat.of([float(s.achieved) for s in soaks])
    n = len(soaks)
    lines = [
        "# Soak benchmark: memory over a long run, recovery after it", "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        f"`python -m bench.soak_bench --size {size} --rate {rate:.0f} --runs {n}` "
        f"({elapsed:.0f} s in all). "
        + ("One run." if n == 1 else
           f"{n} runs, each on a broker and app of its own; figures are median [min, max] "
           "over the runs."), "",
        "## Machine", "", md_facts(facts), "",
        "## Configuration", "",
        md_facts({
            "App": "`bench/peer_app.py --impl ours` (word count), local[3], 1 s batches, "
                   f"{BLOCK_MS} ms block interval",
            "Load": f"{rate:.0f} lines/s offered, {sent.fmt(0)}/s sent "
                    f"({statistics.median(s.sent for s in soaks):,.0f} lines per run, about "
                    f"95 B each) for {cfg['minutes']:.0f} min",
            "Sampling": f"VmRSS every {SAMPLE_S:.0f} s; warm-up {cfg['warmup_min']:.0f} min; "
                        "growth = mean of the last tenth / mean of the first minute after "
                        "warm-up - 1",
        }), "",
        "## Memory", "",
        md_table(["Part", "After warm-up (MiB, median)", "End (MiB, median)",
                  "Peak (MiB, any run)", "Growth, median [min, max]"], rows),
        "", *verdicts, "",
        *jvm_lines(soaks, warmup_s),
        *recovery_lines(soaks, float(cfg["minutes"])),
    ]
    if plotted:
        lines += [f"![memory and the kill]({plotted})", ""]
    return "\n".join(lines)


def default_rate() -> float:
    """Half of this service's sustained rate in RESULTS-peer.md, else 4000 lines/s."""
    path = ROOT / "bench" / "results" / "RESULTS-peer.md"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("| (b)"):
                cell = line.split("|")[2].strip().split(" ")[0]
                try:
                    return float(cell) / 2
                except ValueError:
                    break
    return 4000.0


def plot_path(out: Path) -> Path:
    """RESULTS-soak.md -> soak.png beside it; another --out (RESULTS-soak-gc.md) its own."""
    return out.with_name(out.stem.replace("RESULTS-", "") + ".png")


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "results" / "RESULTS-soak.md")
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--runs", type=int, default=3,
                    help="soak runs, each on a broker and app of its own (default 3)")
    ap.add_argument("--rerender", action="store_true",
                    help="redraw the .md and plot from the .json beside --out; measure nothing")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    raw = args.out.with_suffix(".json")
    png = plot_path(args.out)
    soaks: list[Soak] = []
    if args.rerender:
        saved = json.loads(raw.read_text())
        if "runs" not in saved:
            ap.error(f"{raw} holds no runs (written before --runs); measure again")
        soaks = [Soak.from_json(d) for d in saved["runs"]]
        plotted = png.name if plot(soaks, float(cfg["warmup_min"]) * 60, png) else None
        write_results(args.out, render(soaks, cfg, saved["facts"], saved["size"],
                                       saved["elapsed"], plotted))
        return 0
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    rate = args.rate or default_rate()
    exit_on_sigterm()
    started = time.monotonic()
    facts: dict[str, str] = {}
    for n in range(args.runs):
        log(f"soak run {n + 1} of {args.runs}")
        workdir = Path(tempfile.mkdtemp(prefix="walstream-soak-"))
        try:
            with bench_broker() as broker:
                facts = facts or machine_info(broker.description)
                soaks.append(run(broker.bootstrap, broker.pid, workdir, cfg, rate))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        # The raw runs beside the results after every run, so a later failure (or a
        # run without matplotlib) costs no measurement: --rerender redraws from it.
        raw.write_text(json.dumps({
            "size": args.size, "facts": facts, "elapsed": time.monotonic() - started,
            "runs": [s.to_json() for s in soaks]}, indent=None))
    plotted = png.name if plot(soaks, float(cfg["warmup_min"]) * 60, png) else None
    write_results(args.out, render(soaks, cfg, facts, args.size,
                                   time.monotonic() - started, plotted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
