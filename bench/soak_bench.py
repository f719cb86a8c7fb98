"""Soak benchmark: memory over a long run, then recovery after that long history.

Usage (from the repo root)::

    python -m bench.soak_bench [--size small|full] [--rate LINES_PER_S] \
        [--out bench/RESULTS-soak.md]

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

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    pyplot,
    rss_mib,
    with_gaps,
    write_results,
)
from bench.peer_bench import ROOT, App, LineServer, Phase
from bench.recovery_bench import BLOCK_MS, Recovery, measure

SIZES: dict[str, dict[str, Any]] = {
    "small": dict(minutes=3.0, warmup_min=1.0),
    "full": dict(minutes=30.0, warmup_min=5.0),
}
SAMPLE_S = 10.0
BACKLOG = 1000
PARTS = ("driver (Python)", "driver JVM", "Python workers", "broker")


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        out[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _app_jvms(app_pid: int, table: dict[int, tuple[int, int]]) -> set[int]:
    """The JVMs in the app's process group (the driver's, started by PySpark)."""
    return {pid for pid, (_, pgrp) in table.items()
            if pgrp == app_pid and pid != app_pid
            and "java" in _cmdline(pid).split(" ")[0]}


def sample(app_pid: int, broker_pid: int) -> dict[str, float]:
    """MiB per part; a part with no process reads 0.

    PySpark's worker daemon puts itself and the workers it forks in a process
    group of their own (``os.setpgid(0, 0)`` in ``pyspark.daemon``), so the
    workers are found as the groups of the JVM's children, not in the app's group.
    """
    parts = dict.fromkeys(PARTS, 0.0)
    table = _proc_table()
    jvms = _app_jvms(app_pid, table)
    for pid, (_, pgrp) in table.items():
        if pgrp != app_pid:
            continue
        mib = rss_mib(pid) or 0.0
        if pid == app_pid:
            parts["driver (Python)"] += mib
        elif pid in jvms:
            parts["driver JVM"] += mib
        else:
            parts["Python workers"] += mib
    worker_groups = {pgrp for pid, (ppid, pgrp) in table.items()
                     if ppid in jvms and pgrp != app_pid}
    for pid, (_, pgrp) in table.items():
        if pgrp in worker_groups:
            parts["Python workers"] += rss_mib(pid) or 0.0
    if broker_pid:
        parts["broker"] = rss_mib(broker_pid) or 0.0
    return parts


def _jcmd(pid: int, *args: str) -> str | None:
    """``jcmd PID ARGS`` output, or None (logged) when it fails."""
    try:
        return subprocess.run(["jcmd", str(pid), *args], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"jcmd {' '.join(args)} on the JVM {pid} failed: {exc}")
        return None


def start_gc_log(app_pid: int, path: Path) -> bool:
    """Log every GC of the app's JVM to ``path`` from now on (``jcmd VM.log``).

    Switched on in the running JVM, so the app's command line and configuration
    stay those of the other benchmarks; a log line costs nothing measurable
    beside a collection.
    """
    jvms = _app_jvms(app_pid, _proc_table())
    return bool(jvms) and _jcmd(min(jvms), "VM.log", f"output={path}", "what=gc",
                                "decorators=timemillis") is not None


_GC_LINE = re.compile(r"^\[(\d+)ms\].*Pause (\w+).*? (\d+)M->(\d+)M\((\d+)M\)")


def heap_after_gc(path: Path, t0_wall: float) -> list[tuple[float, float]]:
    """(seconds since ``t0_wall``, lowest heap after a GC pause in MiB), a point per minute.

    The heap a pause leaves holds the live data plus old-generation garbage not yet
    collected, so the lowest figure of a minute is a ceiling on the live heap
    then: a leak shows as that ceiling rising, whatever G1 commits around it.
    """
    lows: dict[int, float] = {}
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        m = _GC_LINE.match(line)
        if m is None:
            continue
        minute = int((int(m.group(1)) / 1000 - t0_wall) // 60)
        after = float(m.group(4))
        lows[minute] = min(after, lows.get(minute, after))
    return [(60.0 * k + 30.0, v) for k, v in sorted(lows.items()) if k >= 0]


def jvm_after_full_gc(app_pid: int) -> tuple[float, float] | None:
    """(RSS MiB, live heap MiB) of the app's JVM after a full GC forced with jcmd.

    A JVM's RSS follows its committed heap, which G1 grows while garbage waits for
    a collection and shrinks only after a full one; the live heap after a full GC
    tells a leak (live data growing) from heap not yet given back. Run once, after
    the last sample, so the growth figures are of the untouched run.
    """
    jvms = _app_jvms(app_pid, _proc_table())
    if not jvms:
        return None
    pid = min(jvms)
    if _jcmd(pid, "GC.run") is None:
        return None
    time.sleep(2.0)
    info = _jcmd(pid, "GC.heap_info")
    if info is None:
        return None
    used = re.search(r"used (\d+)K", info)
    rss = rss_mib(pid)
    if used is None or rss is None:
        return None
    return rss, int(used.group(1)) / 1024


def live_classes(app_pid: int, top: int = 8) -> list[tuple[str, float, int]]:
    """(class, MiB, instances) of the largest classes on the JVM's live heap.

    ``jcmd GC.class_histogram`` forces a full GC first, so it runs after the
    last sample, beside ``jvm_after_full_gc``: what the live heap is made of.
    """
    jvms = _app_jvms(app_pid, _proc_table())
    out = _jcmd(min(jvms), "GC.class_histogram") if jvms else None
    rows = []
    for line in (out or "").splitlines():
        m = re.match(r"\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", line)
        if m:
            rows.append((m.group(3), int(m.group(2)) / 2**20, int(m.group(1))))
    return rows[:top]


@dataclass
class Soak:
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

    soak.recovery = measure("ours", bootstrap, workdir, BACKLOG, seconds, history)
    outs = sorted(workdir.glob("ours-*.jsonl"))
    if outs:
        soak.batches = App.read_batches(outs[-1])
    return soak


def plot(soak: Soak, warmup_s: float, path: Path,
         marks: Sequence[tuple[float, str]] = ()) -> bool:
    """Memory over the run (``marks``: (seconds, label) lines) and, when the batches
    were kept, lines per batch around the kill."""
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(2 if soak.batches else 1, 1, figsize=(9, 7 if soak.batches else 4),
                             squeeze=False)
    ax1 = axes[0][0]
    xs = [t / 60 for t, _ in soak.samples]
    for part in PARTS:
        ax1.plot(xs, [s[part] for _, s in soak.samples], label=part)
    if soak.heap_after_gc:
        ax1.plot([t / 60 for t, _ in soak.heap_after_gc], [v for _, v in soak.heap_after_gc],
                 "--", label="JVM heap after GC (lowest a minute)")
    ax1.axvline(warmup_s / 60, color="grey", linestyle=":", label="end of warm-up")
    for t, label in marks:
        ax1.axvline(t / 60, color="black", linestyle="--", linewidth=0.8, label=label)
    ax1.set_xlabel("minutes")
    ax1.set_ylabel("RSS (MiB)")
    ax1.set_title(f"walstream word count at {soak.rate:.0f} lines/s: resident memory")
    ax1.legend(fontsize=8)
    if soak.batches:
        ax2 = axes[1][0]
        tail_from = soak.batches[-1]["wall"] - 240
        pts = [b for b in soak.batches if b["wall"] >= tail_from]
        t_end = soak.batches[-1]["wall"]
        ax2.plot(*with_gaps([(b["wall"] - t_end, float(b["records"])) for b in pts], gap=3.0),
                 ".-")
        ax2.set_xlabel("seconds before the last batch (completion time)")
        ax2.set_ylabel("lines per completed batch")
        ax2.set_title("Around the kill: slow sink (backlog), SIGKILL, restart, catch-up")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def render(soak: Soak, cfg: dict[str, Any], facts: dict[str, str], size: str,
           elapsed: float, plotted: str | None) -> str:
    warmup_s = float(cfg["warmup_min"]) * 60
    rows, verdicts = [], []
    for part in PARTS:
        if part == "broker" and not any(s[part] for _, s in soak.samples):
            continue
        b, e, g = growth(soak, part, warmup_s)
        peak = max(s[part] for _, s in soak.samples)
        rows.append([part, f"{b:.0f}", f"{e:.0f}", f"{peak:.0f}", f"{g * 100:+.1f}%"])
        verdicts.append(f"- {part}: {g * 100:+.1f}% (target < 10%): "
                        f"**{'met' if g < 0.10 else 'missed'}**")
    r = soak.recovery
    lines = [
        "# Soak benchmark: memory over a long run, recovery after it", "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        f"`python -m bench.soak_bench --size {size} --rate {soak.rate:.0f}` "
        f"({elapsed:.0f} s in all). One run.", "",
        "## Machine", "", md_facts(facts), "",
        "## Configuration", "",
        md_facts({
            "App": "`bench/peer_app.py --impl ours` (word count), local[3], 1 s batches, "
                   f"{BLOCK_MS} ms block interval",
            "Load": f"{soak.rate:.0f} lines/s offered, {soak.achieved:.0f}/s sent "
                    f"({soak.sent:,} lines, about 95 B each) for {cfg['minutes']:.0f} min",
            "Sampling": f"VmRSS every {SAMPLE_S:.0f} s; warm-up {cfg['warmup_min']:.0f} min; "
                        "growth = mean of the last tenth / mean of the first minute after "
                        "warm-up - 1",
        }), "",
        "## Memory", "",
        md_table(["Part", "After warm-up (MiB)", "End (MiB)", "Peak (MiB)", "Growth"], rows),
        "", *verdicts, "",
    ]
    if soak.jvm_gc is not None:
        lines += [f"Driver JVM after a full GC forced (`jcmd GC.run`) after the last sample: "
                  f"RSS **{soak.jvm_gc[0]:.0f} MiB**, live heap **{soak.jvm_gc[1]:.0f} MiB** "
                  "(max heap: spark.driver.memory). A JVM's "
                  "RSS follows its committed heap, which grows while garbage waits and "
                  "shrinks only after a full collection: a leak shows as live heap "
                  "growing, not as RSS alone.", ""]
    if len([t for t, _ in soak.heap_after_gc if t >= warmup_s]) >= 4:
        b, e, g = series_growth(soak.heap_after_gc, warmup_s)
        lines += [f"Driver JVM heap after a collection (from its GC log, switched on with "
                  f"`jcmd VM.log` at the first sample; the lowest figure a GC pause left in "
                  f"each minute, a ceiling on the live heap): **{b:.0f} MiB** in the first "
                  f"minute after warm-up, **{e:.0f} MiB** at the end ({g * 100:+.1f}%). "
                  "Not a target line: the target is on RSS; this tells live data growing "
                  "(a leak) from heap that G1 committed and keeps.", ""]
    if soak.live_classes:
        lines += ["Largest classes on the live heap at the end (`jcmd GC.class_histogram`, "
                  "after the last sample):", "",
                  md_table(["Class", "MiB", "Instances"],
                           [[f"`{c}`", f"{mib:.1f}", f"{n:,}"]
                            for c, mib, n in soak.live_classes]), ""]
    if r is not None:
        lines += [
            "## Recovery after the long history", "",
            f"Backlog {r.nominal_blocks:,} blocks (exact {r.exact_blocks}; "
            f"{r.backlog_lines:,} lines) after "
            f"{cfg['minutes']:.0f} min: first batch **{r.first_batch_s:.1f} s** after the "
            f"restart command, caught up after **{r.caught_up_s:.1f} s** "
            f"({r.batches_rerun} batches re-run). {r.note} Compare with the same backlog "
            "after one minute in [RESULTS-recovery.md](RESULTS-recovery.md).", ""]
    if plotted:
        lines += [f"![memory and the kill]({plotted})", ""]
    return "\n".join(lines)


def default_rate() -> float:
    """Half of this service's sustained rate in RESULTS-peer.md, else 4000 lines/s."""
    path = ROOT / "bench" / "RESULTS-peer.md"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("| (b)"):
                cell = line.split("|")[2].strip().split(" ")[0]
                try:
                    return float(cell) / 2
                except ValueError:
                    break
    return 4000.0


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "RESULTS-soak.md")
    ap.add_argument("--rate", type=float, default=None)
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    rate = args.rate or default_rate()
    exit_on_sigterm()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="walstream-soak-"))
    try:
        with bench_broker() as broker:
            facts = machine_info(broker.description)
            soak = run(broker.bootstrap, broker.pid, workdir, cfg, rate)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # The raw samples and batches beside the results, so the plot can be redrawn
    # (a run without matplotlib, or another view) without another 30-minute run.
    args.out.with_suffix(".json").write_text(json.dumps({
        "samples": soak.samples, "batches": soak.batches[-600:],
        "jvm_gc": soak.jvm_gc, "heap_after_gc": soak.heap_after_gc,
        "live_classes": soak.live_classes}, indent=None))
    png = args.out.parent / "soak.png"
    plotted = png.name if plot(soak, float(cfg["warmup_min"]) * 60, png) else None
    write_results(args.out, render(soak, cfg, facts, args.size,
                                   time.monotonic() - started, plotted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
