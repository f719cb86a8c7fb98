"""Failover: the recovery benchmark's ``ours-ha`` system, a hot standby taking over.

Run by ``bench.recovery_bench --impls ... ours-ha`` beside the cold restarts of the
same app (``ours``) and Spark's getOrCreate (``spark``), with the same history,
backlog and kill. One measurement:

1. **Leader.** ``bench/peer_app.py --impl ours-ha`` (the same word count with
   ``spark.walstream.ha.enabled=true``) starts on a checkpoint directory of its
   own, hence an app id, driver WAL and lease topic of its own; it leads once its
   receivers connected and its role file says ``leader``.
2. **Standby.** The same command starts again; it stands by once its role file
   says ``standby`` (its ``start()`` returned: SparkContext up, the graph restored,
   its tracker following the driver WAL). Its workers' warm-up job runs on in the
   background, so ``STANDBY_SETTLE_S`` pass before step 3: the cost read there is
   that of standing by, not of starting.
3. **History and steady cost.** The leader runs ``history_s`` seconds at ``RATE``
   lines/s while the standby stands by; over exactly that interval the standby's
   CPU (clock ticks of its Python driver, JVM and Python workers, also those of
   workers that exited) and resident memory (VmRSS summed over the same processes,
   sampled every second) are read from /proc, and the leader's beside them.
4. **Backlog.** As for the cold restart: the gate file makes the output operation
   wait while the line servers go on for ``backlog x block_ms / receivers``.
5. **Crash.** SIGKILL of the leader's whole process group; the gate goes at once
   (so the standby's batches are not held), and the standby is left to notice the
   lease expire and take over. Nothing is restarted. From the kill on, the first
   line server serves its newest connection (the new leader's receiver) with lines
   that begin with ``FRESH_WORD``, at ``RATE`` as in the history: data produced
   after the fault.
6. From the SIGKILL: **first batch** (the first batch the standby completes),
   **new data** (the first completed batch that counted a fresh word: what a user
   waits for to see data produced after the fault) and **caught up** (the first
   completed batch whose time is after the SIGKILL: the whole backlog done).

The backlog in blocks is counted as for the cold restart (block intervals from the
last completed batch to the kill, plus the other receivers' blocks of the backlog
phase). The exact count from the tracker state is not read: reading the driver WAL
at the kill would take CPU from the standby while it takes over. Both processes
are stopped, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import log
from bench.failover_probe import CostProbe
from bench.peer_apps import FRESH_WORD, App, LineServer, Phase, wait_connected
from bench.recovery_runs import BLOCK_MS, RATE, Recovery, app_master, send_all

IMPL = "ours-ha"
#: Seconds between the standby's ready and the start of the history (step 2).
STANDBY_SETTLE_S = 10.0
#: Bound on the wait for a process's role (a SparkContext start and warm-up on a
#: loaded 2-core machine).
ROLE_TIMEOUT_S = 240.0


def roles(path: Path) -> dict[int, str]:
    """pid -> the role each process wrote to the role file (a line being written is
    skipped)."""
    out: dict[int, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                row = json.loads(line)
                out[int(row["pid"])] = str(row["role"])
    return out


def wait_role(path: Path, app: App, role: str, timeout_s: float = ROLE_TIMEOUT_S) -> None:
    """Wait until ``app`` wrote ``role`` to the role file; raise when it wrote
    another, exited or ran out of time."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = roles(path).get(app.proc.pid)
        if got == role:
            return
        tail = app.log_path.read_text(errors="replace")[-3000:] \
            if app.log_path.exists() else ""
        if got is not None:
            raise RuntimeError(f"{IMPL} process {app.proc.pid} is the {got}, not the "
                               f"{role}; see {app.log_path}:\n{tail}")
        if app.proc.poll() is not None:
            raise RuntimeError(f"{IMPL} process {app.proc.pid} exited "
                               f"({app.proc.returncode}) before it was the {role}; "
                               f"see {app.log_path}:\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{IMPL} process {app.proc.pid} was not the {role} in "
                               f"{timeout_s:.0f} s; see {app.log_path}")
        time.sleep(0.2)


def nominal_blocks(killed_ms: float, done_ms: int, block_ms: int, receivers: int,
                   backlog_s: float) -> int:
    """One block per interval from the last completed batch to the kill, and the other
    receivers' blocks of the backlog phase (as the cold restart counts them)."""
    return (round((killed_ms - done_ms) / block_ms)
            + (receivers - 1) * round(backlog_s * 1000 / block_ms))


@dataclass(frozen=True)
class Takeover:
    """Seconds from the SIGKILL to the standby's first completed batch, to its first
    that counted data sent after the kill, and to its first whose time is after the
    kill (NaN: none yet); the batches it re-ran before that one."""

    first: float
    fresh: float
    caught: float
    rerun: int


def takeover_figures(batches: list[dict[str, Any]], standby_pid: int,
                     killed_wall: float) -> Takeover:
    """Step 6's figures from the app's batch lines."""
    nan = float("nan")
    mine = [b for b in batches if b.get("pid") == standby_pid]
    first = mine[0]["wall"] - killed_wall if mine else nan
    fresh = next((b["wall"] - killed_wall for b in mine if b.get("fresh", 0) > 0), nan)
    late = [b for b in mine if b["t"] >= killed_wall * 1000]
    if not late:
        return Takeover(first, fresh, nan, 0)
    rerun = sum(1 for b in mine if b["t"] < killed_wall * 1000)
    return Takeover(first, fresh, late[0]["wall"] - killed_wall, rerun)


def measure_failover(bootstrap: str, workdir: Path, backlog: int, history_s: float,
                     timeout_s: float, block_ms: int = BLOCK_MS,
                     receivers: int = 1) -> Recovery:
    """Steps 1-6 of the module docstring; ``timeout_s`` bounds the wait for the
    standby to catch up after the SIGKILL."""
    # A fresh directory per measurement: a checkpoint directory of its own, so an app
    # id (hashed from it) and a lease topic of its own, whatever port is reused.
    run_dir = Path(tempfile.mkdtemp(prefix="ha-", dir=workdir))
    servers = [LineServer() for _ in range(receivers)]
    gate, role_file = run_dir / "gate", run_dir / "roles.jsonl"
    env = {"PEER_GATE": str(gate), "PEER_ROLES": str(role_file), "PEER_FRESH_WORD": FRESH_WORD}
    extra = ["--block-interval-ms", str(block_ms), "--master", app_master(receivers),
             "--extra-ports", ",".join(str(s.port) for s in servers[1:])]
    apps: list[App] = []
    res = Recovery(IMPL, backlog, history_s)
    try:
        leader = App(IMPL, servers[0].port, bootstrap, run_dir, extra, env)  # 1.
        apps.append(leader)
        for s in servers:
            wait_connected(s, leader, 120)
        wait_role(role_file, leader, "leader")
        standby = App(IMPL, servers[0].port, bootstrap, run_dir, extra, env)  # 2.
        apps.append(standby)
        wait_role(role_file, standby, "standby")
        log(f"{IMPL}: leader {leader.proc.pid}, standby {standby.proc.pid} ready")
        time.sleep(STANDBY_SETTLE_S)
        probe = CostProbe({"standby": standby.proc.pid, "leader": leader.proc.pid})
        with probe:  # 3.
            servers[0].run_phase(Phase(RATE), history_s)
            costs = probe.stop()
        res.steady = {"standby_cpu": costs["standby"].cpu_cores,
                      "standby_rss_mib": costs["standby"].rss_mib,
                      "leader_cpu": costs["leader"].cpu_cores,
                      "leader_rss_mib": costs["leader"].rss_mib}
        _fail_over(leader, standby, servers, gate, res, block_ms, receivers, timeout_s)
        if res.kill_wall:
            res.ran_s = res.kill_wall - leader.started_wall
        log(f"{IMPL} ({receivers} receiver(s)): backlog {res.nominal_blocks} blocks / "
            f"{res.backlog_lines} lines: first batch {res.first_batch_s:.2f} s, first with "
            f"new data {res.fresh_data_s:.2f} s, caught up "
            f"{res.caught_up_s:.1f} s from the SIGKILL ({res.batches_rerun} batches "
            f"re-run); standby {res.steady['standby_cpu']:.2f} cores, "
            f"{res.steady['standby_rss_mib']:.0f} MiB while standing by {res.note}")
    except (TimeoutError, RuntimeError) as exc:
        # A setup that failed (an app that never led or stood by) is one failed run
        # in the file, with its reason, not the end of the whole benchmark.
        res.note = f"run failed: {exc}"
        log(f"{IMPL}: {res.note}")
    finally:
        for a in apps:
            with contextlib.suppress(OSError, ValueError):
                a.stop()
        for s in servers:
            s.close()
    return res


def _fail_over(leader: App, standby: App, servers: list[LineServer], gate: Path,
               res: Recovery, block_ms: int, receivers: int, timeout_s: float) -> None:
    """Steps 4-6: backlog, SIGKILL of the leader's group, the standby's batches."""
    done_ms = max((b["t"] for b in leader.batches() if b.get("pid") == leader.proc.pid),
                  default=0)
    gate.touch()  # 4. backlog
    backlog_s = res.backlog_target * block_ms / 1000 / receivers
    res.backlog_lines = send_all(servers, RATE, backlog_s)
    time.sleep(2 * block_ms / 1000 + 0.5)  # the last block is stored and reported
    if standby.proc.poll() is not None:
        res.note = f"the standby exited ({standby.proc.returncode}) before the kill"
        return
    killed = time.time()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader.proc.pid, signal.SIGKILL)  # 5. crash
    gate.unlink()
    stop_feeding = threading.Event()
    # As the history: the first line server only, at RATE (one block per interval).
    feeder = threading.Thread(target=_feed_fresh, args=(servers[0], RATE, timeout_s,
                                                        stop_feeding), daemon=True)
    feeder.start()
    try:
        leader.kill()  # the same SIGKILL again, and the wait until the group is gone
        res.kill_wall = res.restart_wall = killed  # nothing restarts: both clocks here
        res.nominal_blocks = nominal_blocks(killed * 1000, done_ms, block_ms, receivers,
                                            backlog_s)
        _await_takeover(standby, killed, res, timeout_s)  # 6.
    finally:
        stop_feeding.set()
        feeder.join(10)
    res.timeline = [(b["wall"], int(b["words"])) for b in standby.batches()]


def _feed_fresh(server: LineServer, rate: float, timeout_s: float,
                stop: threading.Event) -> None:
    """Step 5's fresh lines to the newest receiver of ``server`` until ``stop``."""
    try:
        server.serve_newest(timeout_s)
    except TimeoutError:
        return  # the figure stays NaN and the run's note says why
    server.serve_fresh()
    server.run_phase(Phase(rate), timeout_s, stop=stop)


def _await_takeover(standby: App, killed: float, res: Recovery, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fig = takeover_figures(standby.batches(), standby.proc.pid, killed)
        res.first_batch_s, res.fresh_data_s = fig.first, fig.fresh
        if fig.caught == fig.caught and fig.fresh == fig.fresh:
            res.caught_up_s, res.batches_rerun = fig.caught, fig.rerun
            return
        if standby.proc.poll() is not None:
            res.note = f"the standby exited ({standby.proc.returncode}) after the kill"
            return
        time.sleep(0.1)
    fig = takeover_figures(standby.batches(), standby.proc.pid, killed)
    res.caught_up_s, res.batches_rerun = fig.caught, fig.rerun
    res.note = (f"no batch with data sent after the kill in {timeout_s:.0f} s"
                if fig.caught == fig.caught else f"not caught up in {timeout_s:.0f} s")
