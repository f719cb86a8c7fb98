"""Recovery benchmark: restart after a driver SIGKILL, against backlog, ours vs Spark.

Usage (from the repo root)::

    python -m bench.recovery_bench [--size small|full] [--runs N] [--backlogs B ...] \
        [--history-s S] [--receivers R] [--impls spark ours [ours-ha]] \
        [--out bench/results/RESULTS-recovery.md]

``--impls ... ours-ha`` adds a third system, run in the same loop (runs
interleaved with the other two): the same app under high availability, a leader
and a hot standby, the leader SIGKILLed at the same backlog and the standby taking
over without any restart (``bench/failover_bench.py``); the results file then has
a failover section (``bench/failover_render.py``) with its ratios to both restarts,
the target (median first batch at most 2 s at every backlog) met or missed, and
the standby's CPU and memory while it stood by. Without ``ours-ha`` nothing changes.
The failover run of the issue is::

    python -m bench.recovery_bench --size full --backlogs 100 1000 10000 \
        --receivers 10 --restart-timeout 150 --impls spark ours ours-ha \
        --out bench/results/RESULTS-failover.md

``make bench`` runs it five times: ``--size full`` (10^2 and 10^3 blocks, 3 runs,
one minute of history, one receiver); 10^4 blocks (3 runs) and 10^5 blocks (1 run)
with ``--receivers 10`` (ten socket streams: the backlog phase cuts ten blocks per
interval, so 10^5 blocks take 17 minutes of input per system instead of 2.8 hours);
and 10^3 blocks with ``--kills 3`` after one minute (RESULTS-recovery-kills.md) and
after 30 minutes of history (``--history-s 1800``, RESULTS-recovery-history.md):
recovery against run length, the same kills per run on both sides. Each run's figures also
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
5. **Again (``--kills K``).** The server feeds the restarted app's receiver,
   which runs ``SETTLE_S`` at ``RATE`` after it caught up; then steps 2-4 again,
   K kills in all. Each kill is one measurement, its history the run so far: the
   30-minute history costs its 30 minutes once for K figures, not K times.

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
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    log,
    machine_info,
    write_results,
)
from bench.failover_bench import measure_failover
from bench.peer_apps import ROOT, App, LineServer, Phase, wait_connected
from bench.recovery_render import plot, plot_kill, render
from bench.recovery_runs import (
    BLOCK_MS,
    RATE,
    SETTLE_S,
    Cell,
    IncomparableRunsError,
    Recovery,
    app_master,
    cells_json,
    compared,
    load_earlier,
    prefill,
    send_all,
)

SIZES: dict[str, dict[str, Any]] = {
    "small": dict(backlogs=[100, 1000], history_s=20.0, runs=1),
    "full": dict(backlogs=[100, 1000], history_s=60.0, runs=3),
}
RESTART_TIMEOUT_S = 600.0


def ours_backlog_blocks(checkpoint: Path, bootstrap: str, done_ms: int) -> int:
    """Blocks a restart of this service must process: unallocated + after ``done_ms``."""
    from walstream.driver.dstream.checkpoint_inspect import inspect_checkpoint

    state = inspect_checkpoint(str(checkpoint), bootstrap)["tracker"]
    blocks = sum(len(q) for q in state["unallocated"].values())
    for t, per in state["allocated"].items():
        if int(t) > done_ms:
            blocks += sum(len(q) for q in per.values())
    return blocks


History = Callable[[App, LineServer], None]


def measure(impl: str, bootstrap: str, workdir: Path, backlog: int,
            history_s: float, history: History | None = None,
            restart_timeout_s: float = RESTART_TIMEOUT_S,
            block_ms: int = BLOCK_MS, receivers: int = 1,
            kills: int = 1, settle_s: float = SETTLE_S) -> list[Recovery]:
    """Steps 1-5 of the module docstring, one Recovery per kill; ``history``
    replaces step 1 (the soak's run). ``restart_timeout_s`` bounds the wait for
    the restarted app to catch up; ``block_ms`` is the block interval. With
    ``receivers`` > 1 the app unions that many socket streams on
    ``local[receivers + 2]`` (two task slots beside the receivers, as ``local[3]``
    leaves one receiver): the history feeds the first only, the backlog all of
    them (``receivers`` blocks per interval, so the backlog phase lasts ``backlog
    x block_ms / receivers``). With ``kills`` > 1, steps 2-4 repeat on the
    restarted app after it caught up and ran ``settle_s`` more (step 5); a restart
    that does not catch up ends the run."""
    servers = [LineServer() for _ in range(receivers)]
    gate = workdir / f"gate-{impl}-{servers[0].port}"
    env = {"PEER_GATE": str(gate)}
    extra = ["--block-interval-ms", str(block_ms), "--master", app_master(receivers),
             "--extra-ports", ",".join(str(s.port) for s in servers[1:])]
    run = _Run(impl, bootstrap, workdir, servers, gate, extra, env, block_ms, receivers,
               restart_timeout_s)
    apps = [App(impl, servers[0].port, bootstrap, workdir, extra, env)]
    out: list[Recovery] = []
    try:
        for s in servers:
            wait_connected(s, apps[0], 120)
        if history is None:  # 1. history
            servers[0].run_phase(Phase(RATE), history_s)
        else:
            history(apps[0], servers[0])
        for k in range(kills):
            if k:  # 5. the restarted app takes the input again and settles
                for s in servers:
                    s.serve_newest(60)
                servers[0].run_phase(Phase(RATE), settle_s)
            res = Recovery(impl, backlog, history_s)
            run.kill_and_restart(apps, res)
            res.ran_s = res.kill_wall - apps[0].started_wall
            out.append(res)
            log(f"{impl} ({receivers} receiver(s)), kill {k + 1}/{kills} after "
                f"{res.ran_s:.0f} s of running: backlog {res.nominal_blocks} blocks "
                f"(exact: {res.exact_blocks}) / {res.backlog_lines} lines: first batch "
                f"{res.first_batch_s:.1f} s, caught up {res.caught_up_s:.1f} s "
                f"({res.batches_rerun} batches re-run) {res.note}")
            if res.note:
                break
    finally:
        for a in apps:
            with contextlib.suppress(OSError, ValueError):
                a.stop()
        for s in servers:
            s.close()
    return out


@dataclass(frozen=True)
class _Run:
    """What every kill of one measurement shares."""

    impl: str
    bootstrap: str
    workdir: Path
    servers: list[LineServer]
    gate: Path
    extra: list[str]
    env: dict[str, str]
    block_ms: int
    receivers: int
    restart_timeout_s: float

    def kill_and_restart(self, apps: list[App], res: Recovery) -> None:
        """Steps 2-4 on the last of ``apps``, figures into ``res``. The restarted app
        joins ``apps`` as soon as it is started, so the caller's clean-up stops it
        also when the wait for its batches fails."""
        app = apps[-1]
        done_ms = max((b["t"] for b in app.batches()), default=0)
        self.gate.touch()  # 2. backlog
        backlog_s = res.backlog_target * self.block_ms / 1000 / self.receivers
        res.backlog_lines = send_all(self.servers, RATE, backlog_s)
        time.sleep(2 * self.block_ms / 1000 + 0.5)  # the last block is stored and reported
        killed_ms = time.time() * 1000
        app.kill()  # 3. crash
        # One block per interval from the last completed batch to the kill, and the
        # other receivers' blocks of the backlog phase.
        res.nominal_blocks = (round((killed_ms - done_ms) / self.block_ms)
                              + (self.receivers - 1)
                              * round(backlog_s * 1000 / self.block_ms))
        if self.impl == "ours":
            res.exact_blocks = ours_backlog_blocks(app.checkpoint, self.bootstrap, done_ms)
        self.gate.unlink()
        restarted = App(self.impl, self.servers[0].port, self.bootstrap, self.workdir,
                        self.extra, self.env)  # 4. restart
        apps.append(restarted)
        t0 = restarted.started_wall
        deadline = time.monotonic() + self.restart_timeout_s
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
            res.note = f"not caught up in {self.restart_timeout_s:.0f} s"
        res.kill_wall, res.restart_wall = killed_ms / 1000, t0
        # Words the batch's output counted, not the listener's numRecords: Spark
        # reports 0 records for batches it recovers from its WAL.
        res.timeline = [(b["wall"], int(b["words"])) for b in restarted.batches()]


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "results" / "RESULTS-recovery.md")
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
    ap.add_argument("--kills", type=int, default=1,
                    help="kills per run (step 5): after a restart caught up, the app runs "
                         f"{SETTLE_S:.0f} s more and is killed again with the same backlog")
    ap.add_argument("--impls", nargs="+", choices=("spark", "ours", "ours-ha"),
                    default=["spark", "ours"],
                    help="systems to measure (default spark and ours); ours-ha adds the "
                         "failover to a hot standby (bench/failover_bench.py) and its "
                         "section in the results file")
    ap.add_argument("--append", action="store_true",
                    help="add these runs to those in --out's .json (same CPU and "
                         "configuration, else refused before measuring)")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    cfg["block_ms"] = args.block_ms
    if args.receivers < 1:
        ap.error("--receivers must be at least 1")
    cfg["receivers"] = args.receivers
    if args.kills < 1:
        ap.error("--kills must be at least 1")
    cfg["kills"] = args.kills
    if "ours-ha" in args.impls and args.kills > 1:
        ap.error("--kills > 1 is not supported with ours-ha (one failover per run)")
    if args.history_s is not None:
        cfg["history_s"] = args.history_s
    runs = args.runs or int(cfg["runs"])
    backlogs = args.backlogs or list(cfg["backlogs"])
    kinds = ("spark", "ours", *(["ours-ha"] if "ours-ha" in args.impls else []))
    cells = {(impl, b): Cell() for impl in kinds for b in backlogs}
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
                        c = cells[(impl, b)]
                        if impl == "ours-ha":
                            c.add(measure_failover(broker.bootstrap, workdir, b,
                                                   cfg["history_s"], args.restart_timeout,
                                                   block_ms=args.block_ms,
                                                   receivers=args.receivers))
                            continue
                        for r in measure(impl, broker.bootstrap, workdir, b,
                                         cfg["history_s"],
                                         restart_timeout_s=args.restart_timeout,
                                         block_ms=args.block_ms,
                                         receivers=args.receivers, kills=args.kills):
                            c.add(r)
    finally:
        # $WALSTREAM_KEEP_RUN_DIR keeps the apps' logs and checkpoints for a look after.
        if os.environ.get("WALSTREAM_KEEP_RUN_DIR"):
            log(f"run files kept in {workdir}")
        else:
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


if __name__ == "__main__":
    sys.exit(main())
