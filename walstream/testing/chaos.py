"""Chaos harness: kill drivers, receivers and the broker; prove exactly-once results.

``python -m walstream.testing.chaos [--mode receiver|direct|ha] [--seed S]
[--driver-kills N] [--receiver-kills N] [--broker-kills N] [--kill-points]
[--ha-pauses N] [--records N] [--rate R] [--summary FILE]``

Protocol of one run (every random choice from ``--seed``, printed, so a failing
run can be replayed):

1. Start a durable embedded broker of its own (S3-backed Tansu: a SIGKILL of
   the broker loses no acknowledged record), or use ``KAFKA_BOOTSTRAP_SERVERS``
   (then no broker kills).
2. A feeder thread writes ``--records`` seeded lines (``v1|<words>``) to the
   source topic at ``--rate``, mixed with bad records (undecodable bytes, an
   unknown schema version, oversize values); expected word counts come from
   the good records whose delivery was acknowledged.
3. The application (:mod:`walstream.testing.chaos_app`) runs as its own process
   group. Faults, in a seeded order and at seeded times while data flows:
   SIGKILL of the whole driver group (Python, JVM, workers) then a restart with
   ``getOrCreate``; SIGKILL of a receiver's worker process (the driver
   relaunches it); SIGKILL of the broker, down for ``--broker-down-s``, then
   restarted; with ``--kill-points``, each named kill point once: the running
   application is armed through ``WALSTREAM_KILL_POINT_FILE`` and the process
   that reaches the point (driver or receiver worker) dies there by itself.
   A kill point on the block path fires only when blocks arrive, so the
   feeder holds back a reserve of records for each one and releases it when
   the point is armed, however slow the restarts before it were.
4. After every driver death: ``walstream inspect`` of the dead driver's state,
   compared with the state the restarted driver recovers (it writes it to
   ``WALSTREAM_RECOVERED_STATE_FILE`` before its first batch).
5. When the totals reach the input, a few more batches run, the app is killed,
   and the verifier reads the outputs: the exactly-once Kafka output
   (:func:`driver.read_exactly_once`) summed per word, the checkpointed totals,
   and ``saveAsTextFiles`` per batch, which must equal the Kafka output of the
   same batch time. Lost and duplicated word counts must both be 0; every bad
   record must have been reported.
6. Every process started is stopped, also when a check fails.

``--mode ha`` (:func:`run_ha`) runs :mod:`walstream.testing.ha_app` (a generator
receiver of ``--records`` lines and a direct stream of the feeder's topic) twice on
one checkpoint directory, a leader and a hot standby, on a broker of its own (not
durable: no broker kills). Each ``--driver-kills`` fault SIGKILLs the leader's
group; each ``--ha-pauses`` fault SIGSTOPs it past its lease then wakes it, and it
must exit fenced. After each, the standby must take over (its first batch and its
logged takeover time are recorded) and the lost process starts again as the next
standby. The running totals and the exactly-once KafkaSink output must equal the input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from walstream import broker, killpoints, procs
from walstream.kafka_logging import with_logger
from walstream.receiver.rate_receiver import generated_line
from walstream.testing.chaos_config import (
    KILL_POINTS,
    RECEIVER_ONLY_POINTS,
    ROOT,
    ChaosConfig,
    ChaosResult,
    log,
    lost_and_doubled,
)
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import App, is_executor, parent_pid
from walstream.testing.waiting import wait_until

# -- the run -----------------------------------------------------------------------------


def _inspect(ckpt: Path, bootstrap: str) -> dict[str, Any] | None:
    proc = subprocess.run([sys.executable, "-m", "walstream.cli", "inspect", str(ckpt),
                           "--bootstrap", bootstrap], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if proc.returncode != 0:
        return None  # no checkpoint yet: nothing to compare
    return dict(json.loads(proc.stdout)["tracker"])


POLL_S = 0.2  # the pause between polls of the application's state
PROGRESS_POLL_S = 1.0  # the pause between polls of a wait that lasts while batches complete


def _on_block_path(fault: str) -> bool:
    return fault.startswith("point:") and fault[6:] in RECEIVER_ONLY_POINTS


def _plan(cfg: ChaosConfig, rng: random.Random) -> list[str]:
    if cfg.mode == "ha":
        faults = ["driver"] * cfg.driver_kills + ["pause"] * cfg.ha_pauses
        rng.shuffle(faults)
        return faults
    faults = ["driver"] * cfg.driver_kills + ["receiver"] * (
        cfg.receiver_kills if cfg.mode == "receiver" else 0) + ["broker"] * cfg.broker_kills \
        + ["executor"] * (cfg.executor_kills if cfg.cluster and cfg.mode == "receiver" else 0)
    rng.shuffle(faults)
    for p in cfg.kill_points:
        if cfg.mode == "receiver" or p not in RECEIVER_ONLY_POINTS:
            faults.insert(rng.randrange(len(faults) + 1), f"point:{p}")
    return faults


def run(cfg: ChaosConfig) -> ChaosResult:
    if cfg.mode == "ha":
        from walstream.testing.chaos_ha import run_ha

        return run_ha(cfg)
    result = ChaosResult(cfg)
    rng = random.Random(cfg.seed)
    t0 = time.monotonic()
    own_broker = not os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    work = cfg.workdir or Path(tempfile.mkdtemp(prefix="walstream-chaos-"))
    home = work / "broker"
    app: App | None = None
    feeder: Feeder | None = None
    stack = contextlib.ExitStack()
    try:
        master = ""
        if cfg.cluster:
            from walstream.testing.standalone import standalone_cluster

            master = stack.enter_context(standalone_cluster(2))
        if own_broker:
            state = broker.start(home, procs.free_port(), durable=True, attached=True)
            bootstrap = f"127.0.0.1:{state.port}"
        else:
            bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"].strip()
            cfg.broker_kills = 0
        run_id = uuid.uuid4().hex[:8]
        source, sink = f"chaos-src-{run_id}", f"chaos-out-{run_id}"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
        for t in (source, sink):
            admin.create_topics([NewTopic(t, 1, -1)])[t].result(timeout=60)
        expected_words = sum(len(generated_line(cfg.seed, i).split())
                             for i in range(cfg.records))
        faults = _plan(cfg, rng)
        if cfg.rate <= 0:  # feed while the faults happen (about one gap per fault)
            cfg.rate = max(20.0, cfg.records / (len(faults) + 1) / (sum(cfg.fault_gap_s) / 2))
        log(f"seed {cfg.seed}, mode {cfg.mode}, {cfg.records} records at {cfg.rate:.0f}/s, "
            f"work dir {work}, faults {faults}")
        # A kill point on the block path fires only when blocks arrive: each gets a
        # reserve of records, held back until it is armed; the rest flows at once.
        block_points = sum(1 for f in faults if _on_block_path(f))
        reserve = max(20, cfg.records // 10)
        held_back = block_points * reserve
        feeder = Feeder(bootstrap, source, cfg,
                        first_tranche=max(0, cfg.records - held_back))

        def release() -> None:
            nonlocal held_back
            held_back -= reserve
            assert feeder is not None
            feeder.allow(cfg.records - held_back)

        feeder.start()
        app = App(work, bootstrap, source, sink, cfg, expected_words, master)
        app.start()
        wait_until(lambda: app is not None and app.batches_since(0), 180, "the first batch",
                   poll_s=POLL_S)
        result.rss_mib.append(app.rss_mib())
        for fault in faults:
            time.sleep(rng.uniform(*cfg.fault_gap_s))
            _fault(fault, app, cfg, home, bootstrap, result,
                   release if _on_block_path(fault) else None)
        feeder.allow(cfg.records)
        wait_until(lambda: feeder is not None and feeder.done.is_set(), cfg.timeout_s,
                   "the feeder", poll_s=POLL_S)
        # After many restarts under the ``all`` down-time policy the application re-runs
        # every missed batch, which on a small machine can take longer than any fixed
        # bound (docs/decisions/chaos-harness-pacing.md): the wait lasts while batches
        # complete, up to ``drain_limit_s`` in all.
        wait_until(lambda: (app.out / "done").exists(), cfg.drain_limit_s,
                   "the totals to reach the input", poll_s=PROGRESS_POLL_S,
                   progress=lambda: len(app.batches_since(0)),
                   stall_s=min(cfg.timeout_s, 300),
                   details=lambda: f"{len(app.batches_since(0))} batches completed")
        done_at = time.time()
        wait_until(lambda: len(app.batches_since(done_at)) >= 3, 120, "three more batches",
                   poll_s=POLL_S)
        result.rss_mib.append(app.rss_mib())
        app.kill()
        _verify(app, feeder, bootstrap, sink, result)
    except Exception as exc:
        result.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        if app is not None:
            app.kill()
        if own_broker:
            broker.stop(home)
        stack.close()
        result.seconds = time.monotonic() - t0
    return result


def _restart_and_compare(app: App, bootstrap: str, result: ChaosResult) -> None:
    """Step 4, then a restart; the recovery time is restart -> first batch."""
    before = _inspect(app.ckpt, bootstrap)
    app.restarts += 1
    recovered = app.work / f"recovered-{app.restarts}.json"
    started = time.time()
    app.start()
    wait_until(lambda: bool(app.batches_since(started)), 300,
               "the first batch after a restart", poll_s=POLL_S)
    result.recoveries_s.append(app.batches_since(started)[0]["wall"] - started)
    if before is not None and recovered.exists():
        after = json.loads(recovered.read_text())
        if after != before:
            result.problems.append(f"restart {app.restarts}: recovered tracker state differs "
                                   "from what walstream inspect printed")


def _fault(fault: str, app: App, cfg: ChaosConfig, home: Path, bootstrap: str,
           result: ChaosResult, release: Callable[[], None] | None = None) -> None:
    if fault == "driver":
        log("SIGKILL the driver group")
        app.kill()
        result.kills["driver"] += 1
        _restart_and_compare(app, bootstrap, result)
    elif fault == "receiver":
        pid = app.receiver_worker_pid()
        if pid > 0:
            log(f"SIGKILL receiver worker {pid}")
            os.kill(pid, 9)
            result.kills["receiver"] += 1
    elif fault == "executor":
        daemon = app.receiver_worker_pid(1)
        jvm = parent_pid(daemon) if daemon > 0 else -1
        if jvm > 0 and not is_executor(jvm):
            raise RuntimeError(f"process {jvm} hosting the receiver is not an executor JVM "
                               "(is the application running on the cluster?)")
        if jvm > 0:
            starts = app.receiver_starts()
            log(f"SIGKILL the executor JVM {jvm} hosting a receiver")
            os.kill(jvm, 9)
            result.kills["executor"] += 1
            try:  # relaunched by the driver's tracker on a live executor
                wait_until(lambda: app.receiver_starts() > starts and
                           app.receiver_worker_pid(1) not in (daemon, -1), 180,
                           "the receiver to be relaunched on another executor",
                           poll_s=POLL_S)
            except TimeoutError as exc:
                result.problems.append(str(exc))
    elif fault == "broker":
        log(f"SIGKILL the broker, down for {cfg.broker_down_s:.0f} s")
        state = broker.kill_broker_only(home)
        result.kills["broker"] += 1
        time.sleep(cfg.broker_down_s)
        broker.start(home, state.port, durable=True, attached=True)
    elif fault.startswith("point:"):
        _kill_point_fault(fault.split(":", 1)[1], app, bootstrap, result, release)
    if not app.alive():
        raise RuntimeError(f"the application died after the fault {fault}; see "
                           f"{app.work / 'app.log'}")


def _kill_point_fault(point: str, app: App, bootstrap: str, result: ChaosResult,
                      release: Callable[[], None] | None) -> None:
    """Arm ``point`` in the running application; whichever of its processes
    reaches it first dies there. A receiver worker is relaunched by the driver;
    a driver is restarted with getOrCreate and its recovered state compared."""
    arm = app.kill_point_file
    seen = app.receiver_worker_pid()
    log(f"arm kill point {point}")
    killpoints.arm_file(arm, point)
    if release is not None:
        release()  # the blocks that will cross it
    try:
        wait_until(lambda: not arm.exists(), 180, f"kill point {point} to fire",
                   poll_s=POLL_S)
        if point == "receiver.after_store_before_report":
            wait_until(lambda: app.receiver_worker_pid() not in (seen, -1), 120,
                       f"the receiver that died at {point} to be relaunched", poll_s=POLL_S)
        else:
            wait_until(lambda: not app.alive(), 30, f"the driver to die at {point}",
                       poll_s=POLL_S)
    except TimeoutError as exc:
        arm.unlink(missing_ok=True)
        result.problems.append(f"kill point {point}: {exc}")
        return
    result.kills["kill_point"] += 1
    if point != "receiver.after_store_before_report":
        app.kill()  # what is left of the group (the JVM, workers)
        _restart_and_compare(app, bootstrap, result)


def _sink_output(bootstrap: str, sink: str, expected: Mapping[str, int],
                 result: ChaosResult) -> dict[int, Counter[str]]:
    """The exactly-once Kafka output per batch; words in / out, batches, lost and
    duplicated into ``result``."""
    from walstream.driver import read_exactly_once

    got: Counter[str] = Counter()
    per_batch: dict[int, Counter[str]] = {}
    for batch, _, value in read_exactly_once(bootstrap, sink):
        word, n = (value or b"").decode().rsplit("\t", 1)
        got[word] += int(n)
        per_batch.setdefault(batch, Counter())[word] += int(n)
    result.words_in, result.words_out = sum(expected.values()), sum(got.values())
    result.batches = len(per_batch)
    result.lost, result.duplicated = lost_and_doubled(expected, got)
    return per_batch


def _verify(app: App, feeder: Feeder, bootstrap: str, sink: str, result: ChaosResult) -> None:
    if feeder.failed:
        result.problems.append(f"feeder: {feeder.failed[:3]}")
    expected = feeder.expected
    result.records_in, result.bad_in = feeder.good, feeder.bad
    per_batch = _sink_output(bootstrap, sink, expected, result)
    totals = json.loads((app.out / "totals.json").read_text())
    if totals != dict(expected):
        result.problems.append("the checkpointed running totals differ from the input")
    # saveAsTextFiles, re-run or not, holds what the Kafka output holds for that batch.
    for d in (app.out / "counts").glob("batch-*"):
        t = int(d.name.split("-")[1])
        text: Counter[str] = Counter()
        for part in d.glob("part-*"):
            for line in part.read_text().splitlines():
                w, n = line.split("\t")
                text[w] += int(n)
        if text != per_batch.get(t, Counter()):
            result.problems.append(f"batch {t}: text output differs from the Kafka output")
            break
    if app.cfg.mode == "receiver":
        reported = set()
        path = app.out / "errors.jsonl"
        for line in (path.read_text().splitlines() if path.exists() else []):
            msg = json.loads(line)["message"]
            if "undecodable record at" in msg:
                reported.add(msg.split("undecodable record at", 1)[1].split("skipped")[0])
        result.bad_reported = len(reported)
    else:
        # Per driver run (a run's count resets); a re-run batch counts again.
        result.bad_reported = sum(json.loads(p.read_text())
                                  for p in app.out.glob("undecodable-*.json"))
    if result.bad_reported < result.bad_in:
        result.problems.append(f"only {result.bad_reported} of {result.bad_in} bad records "
                               "were reported")


def _points(arg: str) -> tuple[str, ...]:
    if arg == "all":
        return KILL_POINTS
    if arg == "none":
        return ()
    points = tuple(p.strip() for p in arg.split(",") if p.strip())
    unknown = [p for p in points if p not in KILL_POINTS]
    if unknown:
        raise SystemExit(f"unknown kill points {unknown}; known: {', '.join(KILL_POINTS)}")
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m walstream.testing.chaos",
                                 description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--mode", choices=("receiver", "direct", "ha"), default="receiver",
                    help="ha: a leader and a hot standby; --driver-kills SIGKILL the leader")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--driver-kills", type=int, default=5)
    ap.add_argument("--receiver-kills", type=int, default=5)
    ap.add_argument("--broker-kills", type=int, default=1)
    ap.add_argument("--cluster", action="store_true",
                    help="run on a standalone cluster (master + 2 workers) on loopback")
    ap.add_argument("--executor-kills", type=int, default=0,
                    help="with --cluster: SIGKILLs of the executor JVM hosting a receiver")
    ap.add_argument("--kill-points", default="all",
                    help="'all', 'none' or a comma-separated list of named kill points")
    ap.add_argument("--records", type=int, default=6000)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="source records/s (default: spread over the planned faults)")
    ap.add_argument("--broker-down-s", type=float, default=10.0)
    ap.add_argument("--ha-pauses", type=int, default=0,
                    help="mode ha: SIGSTOPs of the leader past its lease (it must wake fenced)")
    ap.add_argument("--ha-pause-s", type=float, default=5.0,
                    help="mode ha: how long each pause lasts")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--summary", type=Path, help="append the summary table (markdown) here")
    args = ap.parse_args(argv)

    def on_sigterm(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)  # so the finally blocks stop every process

    signal.signal(signal.SIGTERM, on_sigterm)
    cfg = ChaosConfig(mode=args.mode, seed=args.seed, cluster=args.cluster,
                      executor_kills=args.executor_kills, driver_kills=args.driver_kills,
                      receiver_kills=args.receiver_kills, broker_kills=args.broker_kills,
                      kill_points=_points(args.kill_points), records=args.records,
                      rate=args.rate,
                      broker_down_s=args.broker_down_s, ha_pauses=args.ha_pauses,
                      ha_pause_s=args.ha_pause_s, workdir=args.workdir)
    result = run(cfg)
    table = result.table()
    print(table)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(f"\n### chaos run {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n{table}\n")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
