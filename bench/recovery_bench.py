"""Recovery benchmark: restart after a driver SIGKILL, against backlog, ours vs Spark.

Usage (from the repo root)::

    python -m bench.recovery_bench [--size small|full] [--runs N] [--backlogs B ...] \
        [--history-s S] [--receivers R] [--impls spark ours] [--out bench/RESULTS-recovery.md]

``make bench`` runs it four times: ``--size full`` (10^2 and 10^3 blocks, 3 runs,
one minute of history, one receiver); 10^4 blocks (3 runs) and 10^5 blocks (1 run)
with ``--receivers 10`` (ten socket streams: the backlog phase cuts ten blocks per
interval, so 10^5 blocks take 17 minutes of input per system instead of 2.8 hours);
and 10^3 blocks after 30 minutes of history (``--history-s 1800``,
RESULTS-recovery-history.md: recovery against run length). Each run's figures also
go to a .json beside the results file; ``bench.report`` sets the short and the long
history side by side from them and plots every backlog in one figure.

Both systems run ``bench/peer_app.py`` (the peer benchmark's word count, context
from ``StreamingContext.getOrCreate``) on ``local[3]`` (``local[receivers + 2]``),
also after the restart (Spark's recovery takes the master from its launch: it is
given as ``spark-submit --master`` would), 1 s batches, a 100 ms block
interval (10 blocks, so 10 tasks, per batch: both systems keep up on 2 cores; at
20 ms, 50 tasks per batch, both fell behind before any backlog was made), from one
TCP line server per receiver. One measurement:

1. **History.** The app runs ``history_s`` seconds at ``RATE`` lines/s, every
   batch processed as it comes.
2. **Backlog.** The output operation is made to wait (a slow sink: the file named
   by ``PEER_GATE`` exists) while the line servers go on for ``backlog / 10 /
   receivers`` seconds, one block per receiver and 100 ms interval (the history
   fed only the first receiver): the batches of that time queue up,
   every block stored in the system's WAL and allocated or waiting to be.
3. **Crash.** The app's whole process group (Python driver, JVM, Python workers)
   gets SIGKILL.
4. **Restart.** The gate is removed and the same command started again; it
   restores from its checkpoint and replays its WAL (Spark: the receiver and
   tracker logs in the checkpoint directory; ours: the driver's Kafka WAL).
   Measured from the restart command: **first batch** (the first batch the new
   process completes: the recovery proper) and **caught up** (the first
   completed batch whose time is after the restart command: every batch of the
   backlog is done).

The backlog in blocks is, for both, the number of block intervals (each with
data, so each one block) from the last completed batch to the kill, plus the other
receivers' blocks of the backlog phase; for this
service it is also read exactly from the tracker state the restart begins from
(``walstream inspect``: unallocated blocks plus those of unfinished batches).
Every process started is stopped, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    Stat,
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    finish_plot,
    log,
    machine_info,
    md_facts,
    md_table,
    pyplot,
    with_gaps,
    write_results,
)
from bench.peer_bench import ROOT, App, LineServer, Phase, _label, _wait_connected
from bench.recovery_runs import Earlier, IncomparableRunsError, load_earlier, sessions_line

BLOCK_MS = 100
RATE = 2000.0  # lines/s: 200 lines per block, a tenth of both systems' ceiling
SIZES: dict[str, dict[str, Any]] = {
    "small": dict(backlogs=[100, 1000], history_s=20.0, runs=1),
    "full": dict(backlogs=[100, 1000], history_s=60.0, runs=3),
}
RESTART_TIMEOUT_S = 600.0


@dataclass
class Recovery:
    impl: str
    backlog_target: int
    history_s: float
    nominal_blocks: int = 0  # block intervals from the last completed batch to the kill
    exact_blocks: int | None = None  # from the tracker state (ours only)
    backlog_lines: int = 0
    first_batch_s: float = float("nan")
    caught_up_s: float = float("nan")
    batches_rerun: int = 0
    note: str = ""
    kill_wall: float = 0.0  # time.time() of the SIGKILL
    restart_wall: float = 0.0  # time.time() of the restart command
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (wall, words) per batch


def ours_backlog_blocks(checkpoint: Path, bootstrap: str, done_ms: int) -> int:
    """Blocks a restart of this service must process: unallocated + after ``done_ms``."""
    from checkpoint.inspect import inspect_checkpoint

    state = inspect_checkpoint(str(checkpoint), bootstrap)["tracker"]
    blocks = sum(len(q) for q in state["unallocated"].values())
    for t, per in state["allocated"].items():
        if int(t) > done_ms:
            blocks += sum(len(q) for q in per.values())
    return blocks


History = Callable[[App, LineServer], None]


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


def app_master(receivers: int) -> str:
    """Both apps' master, on first start and on restart: two task slots beside the
    receivers (``local[3]`` with one)."""
    return f"local[{receivers + 2}]"


def _send_all(servers: list[LineServer], rate: float, seconds: float) -> int:
    """``rate`` lines/s split evenly over ``servers`` for ``seconds``; lines sent."""
    phases = [Phase(rate / len(servers)) for _ in servers]
    threads = [threading.Thread(target=s.run_phase, args=(ph, seconds), daemon=True)
               for s, ph in zip(servers, phases, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(ph.sent for ph in phases)


def measure(impl: str, bootstrap: str, workdir: Path, backlog: int,
            history_s: float, history: History | None = None,
            restart_timeout_s: float = RESTART_TIMEOUT_S,
            block_ms: int = BLOCK_MS, receivers: int = 1) -> Recovery:
    """Steps 1-4 of the module docstring; ``history`` replaces step 1 (the soak's run).
    ``restart_timeout_s`` bounds the wait for the restarted app to catch up;
    ``block_ms`` is the block interval. With ``receivers`` > 1 the app unions that
    many socket streams on ``local[receivers + 2]`` (two task slots beside the
    receivers, as ``local[3]`` leaves one receiver): the history feeds the first
    only, the backlog all of them (``receivers`` blocks per interval, so the
    backlog phase lasts ``backlog x block_ms / receivers``)."""
    res = Recovery(impl, backlog, history_s)
    servers = [LineServer() for _ in range(receivers)]
    server = servers[0]
    gate = workdir / f"gate-{impl}-{server.port}"
    env = {"PEER_GATE": str(gate)}
    extra = ["--block-interval-ms", str(block_ms), "--master", app_master(receivers),
             "--extra-ports", ",".join(str(s.port) for s in servers[1:])]
    app = App(impl, server.port, bootstrap, workdir, extra, env)
    restarted: App | None = None
    try:
        for s in servers:
            _wait_connected(s, app, 120)
        if history is None:  # 1. history
            server.run_phase(Phase(RATE), history_s)
        else:
            history(app, server)
        done_ms = max((b["t"] for b in app.batches()), default=0)
        gate.touch()  # 2. backlog
        backlog_s = backlog * block_ms / 1000 / receivers
        res.backlog_lines = _send_all(servers, RATE, backlog_s)
        time.sleep(2 * block_ms / 1000 + 0.5)  # the last block is stored and reported
        killed_ms = time.time() * 1000
        app.kill()  # 3. crash
        # One block per interval from the last completed batch to the kill, and the
        # other receivers' blocks of the backlog phase.
        res.nominal_blocks = (round((killed_ms - done_ms) / block_ms)
                              + (receivers - 1) * round(backlog_s * 1000 / block_ms))
        if impl == "ours":
            res.exact_blocks = ours_backlog_blocks(app.checkpoint, bootstrap, done_ms)
        gate.unlink()
        restarted = App(impl, server.port, bootstrap, workdir, extra, env)  # 4. restart
        t0 = restarted.started_wall
        deadline = time.monotonic() + restart_timeout_s
        pid = restarted.proc.pid
        while time.monotonic() < deadline:
            mine = [b for b in restarted.batches() if b.get("pid") == pid]
            if mine and res.first_batch_s != res.first_batch_s:  # still nan
                res.first_batch_s = mine[0]["wall"] - t0
            late = [b for b in mine if b["t"] >= t0 * 1000]
            if late:
                res.caught_up_s = late[0]["wall"] - t0
                res.batches_rerun = sum(1 for b in mine if b["t"] < t0 * 1000)
                break
            if restarted.proc.poll() is not None:
                res.note = f"restarted app exited ({restarted.proc.returncode})"
                break
            time.sleep(0.1)
        else:
            res.note = f"not caught up in {restart_timeout_s:.0f} s"
        res.kill_wall, res.restart_wall = killed_ms / 1000, t0
        # Words the batch's output counted, not the listener's numRecords: Spark
        # reports 0 records for batches it recovers from its WAL.
        res.timeline = [(b["wall"], int(b["words"])) for b in restarted.batches()]
    finally:
        for a in (app, restarted):
            if a is not None:
                with contextlib.suppress(OSError, ValueError):
                    a.stop()
        for s in servers:
            s.close()
    log(f"{impl} ({receivers} receiver(s)): backlog {res.nominal_blocks} blocks "
        f"(exact: {res.exact_blocks}) / "
        f"{res.backlog_lines} lines after "
        f"{history_s:.0f} s: first batch {res.first_batch_s:.1f} s, caught up "
        f"{res.caught_up_s:.1f} s ({res.batches_rerun} batches re-run) {res.note}")
    return res


@dataclass
class Cell:
    first: list[float] = field(default_factory=list)
    caught: list[float] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    exact: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    example: Recovery | None = None  # the first run, for the plot around the kill


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
    for impl in ("spark", "ours"):
        if not all(cells[(impl, b)].blocks for b in backlogs):
            continue  # not run (--impls)
        xs = [statistics.median(cells[(impl, b)].blocks) for b in backlogs]
        for key, style in (("first", "-o"), ("caught", "--s")):
            ys = [_median(getattr(cells[(impl, b)], key)) for b in backlogs]
            what = "first batch" if key == "first" else "caught up"
            ax.plot(xs, ys, style, label=f"{_label(impl)}: {what}")
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
        ax.plot(xs, ys, ".-", markersize=3,
                label=f"{_label(r.impl)} (restart command at "
                      f"+{r.restart_wall - r.kill_wall:.1f} s)")
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


def render(cells: dict[tuple[str, int], Cell], backlogs: list[int], cfg: dict[str, Any],
           facts: dict[str, str], size: str, sessions: list[dict[str, Any]], elapsed: float,
           plots: list[tuple[str, str]]) -> str:
    rows = []
    verdicts = []
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
        "# Recovery benchmark: driver SIGKILL and getOrCreate, against backlog", "",
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
        }), "",
        "## Results", "",
        md_table(["Backlog (blocks)", "Blocks (a) / (b)", "(a) Spark first batch (s)",
                  "(b) walstream first batch (s)", "(b)/(a)", "(a) Spark caught up (s)",
                  "(b) walstream caught up (s)"], rows), "",
        *verdicts, "",
    ]
    for alt, name in plots:
        lines += [f"![{alt}]({name})", ""]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "RESULTS-recovery.md")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--backlogs", type=int, nargs="*", default=None)
    ap.add_argument("--restart-timeout", type=float, default=RESTART_TIMEOUT_S,
                    help="seconds to wait for a restarted app to catch up")
    ap.add_argument("--block-ms", type=int, default=BLOCK_MS,
                    help="block interval; a shorter one builds a large backlog sooner")
    ap.add_argument("--receivers", type=int, default=1,
                    help="socket streams (receivers); the backlog phase feeds them all, "
                         "so a large backlog builds that many times sooner")
    ap.add_argument("--history-s", type=float, default=None,
                    help="seconds of processed input before the backlog")
    ap.add_argument("--impls", nargs="+", choices=("spark", "ours"),
                    default=["spark", "ours"], help="systems to measure (default both)")
    ap.add_argument("--append", action="store_true",
                    help="add these runs to those in --out's .json (same CPU and "
                         "configuration, else refused before measuring)")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    cfg["block_ms"] = args.block_ms
    if args.receivers < 1:
        ap.error("--receivers must be at least 1")
    cfg["receivers"] = args.receivers
    if args.history_s is not None:
        cfg["history_s"] = args.history_s
    runs = args.runs or int(cfg["runs"])
    backlogs = args.backlogs or list(cfg["backlogs"])
    cells = {(impl, b): Cell() for impl in ("spark", "ours") for b in backlogs}
    earlier = None
    if args.append:  # checked before an hour is spent measuring
        try:
            earlier = load_earlier(args.out.with_suffix(".json"), compared(cfg),
                                   machine_info("")["CPU"], args.impls, backlogs)
        except IncomparableRunsError as e:
            ap.error(f"--append: {e}")
        if earlier is not None:
            prefill(cells, earlier)
    exit_on_sigterm()
    started = time.monotonic()
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    workdir = Path(tempfile.mkdtemp(prefix="walstream-recovery-"))
    try:
        with bench_broker() as broker:
            facts = machine_info(broker.description)
            for i in range(runs):
                for b in backlogs:
                    for impl in args.impls:  # interleaved: drift hits both alike
                        log(f"run {i + 1}/{runs}: {impl}, backlog {b}")
                        r = measure(impl, broker.bootstrap, workdir, b, cfg["history_s"],
                                    restart_timeout_s=args.restart_timeout,
                                    block_ms=args.block_ms,
                                    receivers=args.receivers)
                        c = cells[(impl, b)]
                        c.first.append(r.first_batch_s)
                        c.example = c.example or r
                        c.caught.append(r.caught_up_s)
                        c.blocks.append(r.nominal_blocks)
                        if r.exact_blocks is not None:
                            c.exact.append(r.exact_blocks)
                        if r.note:
                            c.notes.append(r.note)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # RESULTS-recovery.md -> recovery-backlog.png; another --out gets its own plot.
    png = args.out.with_name(args.out.stem.replace("RESULTS-", "") + "-backlog.png")
    plots = [("recovery against backlog", png.name)] if plot(cells, backlogs, png) else []
    kill_png = png.with_name(png.name.replace("-backlog.png", "-kill.png"))
    if plot_kill(cells, backlogs[0], kill_png):
        plots.append(("throughput around the kill", kill_png.name))
    sessions = [*(earlier.sessions if earlier else []),
                {"generated": generated, "code": facts["Code"], "cpu": facts["CPU"],
                 "runs": runs}]
    write_results(args.out, render(cells, backlogs, cfg, facts, args.size, sessions,
                                   time.monotonic() - started, plots))
    # Every run's figures beside the results, for bench.report's run-length table.
    args.out.with_suffix(".json").write_text(json.dumps(cells_json(cells, cfg, sessions)))
    return 0


def compared(cfg: dict[str, Any]) -> dict[str, Any]:
    """The configuration runs must share to be pooled (``recovery_runs.COMPARED``)."""
    receivers = int(cfg["receivers"])
    return {"history_s": cfg["history_s"], "block_ms": cfg["block_ms"], "rate": RATE,
            "receivers": receivers, "spark_restart_master": app_master(receivers)}


def prefill(cells: dict[tuple[str, int], Cell], earlier: Earlier) -> None:
    """Earlier runs' figures first in each cell (null, a run that did not get there,
    back to NaN)."""
    def nums(values: list[float | None]) -> list[float]:
        return [float("nan") if v is None else float(v) for v in values]

    for impl, per in earlier.cells.items():
        for b, fig in per.items():
            c = cells[(impl, int(b))]
            c.first, c.caught = nums(fig["first"]), nums(fig["caught"])
            c.blocks, c.exact = list(fig["blocks"]), list(fig.get("exact", []))


def cells_json(cells: dict[tuple[str, int], Cell], cfg: dict[str, Any],
               sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """The configuration, the invocations the runs came from and every run's figures
    (NaN, a run that did not get there, as null)."""
    def nums(values: list[float]) -> list[float | None]:
        return [v if v == v else None for v in values]

    out: dict[str, Any] = {**compared(cfg), "sessions": sessions,
                           "runs": sum(int(s["runs"]) for s in sessions), "cells": {}}
    for (impl, b), c in cells.items():
        if c.blocks:
            out["cells"].setdefault(impl, {})[str(b)] = {
                "first": nums(c.first), "caught": nums(c.caught), "blocks": c.blocks,
                "exact": c.exact}
    return out


if __name__ == "__main__":
    sys.exit(main())
