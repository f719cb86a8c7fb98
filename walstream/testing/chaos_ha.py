"""The chaos harness's ``--mode ha`` (walstream/testing/chaos.py): a leader and a hot
standby of the HA app, the leader killed or paused at seeded times."""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid
from pathlib import Path

from walstream import broker, procs
from walstream.kafka_logging import with_logger
from walstream.testing.chaos import POLL_S, PROGRESS_POLL_S, _plan, _sink_output
from walstream.testing.chaos_config import (
    ChaosConfig,
    ChaosResult,
    log,
)
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import HAPair
from walstream.testing.recovery_app import expected_counts
from walstream.testing.waiting import wait_until

HA_RESTART_S = 30.0  # about what a relaunched HA process takes to stand by


def run_ha(cfg: ChaosConfig) -> ChaosResult:
    """``--mode ha``: the leader killed or paused, the standby taking over, each time."""
    result = ChaosResult(cfg)
    rng = random.Random(cfg.seed)
    t0 = time.monotonic()
    own_broker = not os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    work = cfg.workdir or Path(tempfile.mkdtemp(prefix="walstream-chaos-ha-"))
    home = work / "broker"
    pair: HAPair | None = None
    cfg.broker_kills = cfg.receiver_kills = cfg.executor_kills = 0
    try:
        bootstrap = (f"127.0.0.1:{broker.start(home, procs.free_port(), attached=True).port}"
                     if own_broker else os.environ["KAFKA_BOOTSTRAP_SERVERS"].strip())
        run_id = uuid.uuid4().hex[:8]
        direct, sink = f"chaos-ha-src-{run_id}", f"chaos-ha-out-{run_id}"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
        for t in (direct, sink):  # a fence never creates a sink topic
            admin.create_topics([NewTopic(t, 1, -1)])[t].result(timeout=60)
        faults = _plan(cfg, rng)
        if cfg.rate <= 0:  # both inputs flow while the faults happen
            cfg.rate = max(20.0, cfg.records / (len(faults) + 1)
                           / (sum(cfg.fault_gap_s) / 2 + HA_RESTART_S))
        log(f"seed {cfg.seed}, mode ha, {cfg.records} receiver lines and {cfg.records} "
            f"direct records at {cfg.rate:.0f}/s each, work dir {work}, faults {faults}")
        feeder = Feeder(bootstrap, direct, cfg)
        feeder.start()
        pair = HAPair(work, bootstrap, sink, total=cfg.records, rate=cfg.rate, seed=cfg.seed,
                      direct=direct)
        leader = pair.launch()
        pair.wait_role(leader, "leader", "the first process to lead and complete a batch")
        standby = pair.launch()
        pair.wait_role(standby, "standby", "the second process to stand by")
        result.rss_mib.append(pair.rss_mib())
        for i, fault in enumerate(faults):
            mark = time.time()
            time.sleep(rng.uniform(*cfg.fault_gap_s))
            pair.first_batch_after(leader, mark, f"fault {i}: the leader's batches")
            pause_s = cfg.ha_pause_s if fault == "pause" else 0.0
            log(f"fault {i}: " + (f"SIGSTOP the leader {leader.pid} for {pause_s:.0f} s"
                                  if pause_s else f"SIGKILL the leader's group {leader.pid}"))
            first, took, problem = pair.fail_over(leader, standby, pause_s)
            if problem is not None:
                log(f"fault {i}: {problem}")
                result.problems.append(problem)
            result.kills[fault] += 1
            result.recoveries_s.append(first)
            result.takeovers_s += [took] if took is not None else []
            log(f"fault {i}: the standby {standby.pid} took over (logged: {took} s); its "
                f"first batch {first:.2f} s after the signal")
            leader, standby = standby, pair.launch()  # the lost one comes back
            pair.wait_role(standby, "standby", f"fault {i}: the relaunched process to stand by")
        wait_until(feeder.done.is_set, cfg.timeout_s, "the feeder", poll_s=POLL_S)
        expected = expected_counts(cfg.seed, cfg.records)
        expected.update({f"d {w}": n for w, n in feeder.expected.items()})
        current = pair  # for the lambdas: not None
        wait_until(lambda: current.totals() == expected, cfg.drain_limit_s,
                   "the running totals to equal the input", poll_s=PROGRESS_POLL_S,
                   progress=lambda: len(current.batches()), stall_s=min(cfg.timeout_s, 300),
                   abort=lambda: "totals over the input" if any(
                       n > expected.get(w, 0) for w, n in current.totals().items()) else None,
                   details=lambda: f"{sum(current.totals().values())} of "
                                   f"{sum(expected.values())} words\n{current.details()}")
        done_at = time.time()
        wait_until(lambda: len(current.batches(leader, done_at)) >= 2, 120, "two more batches",
                   poll_s=POLL_S)
        result.rss_mib.append(pair.rss_mib())
        pair.close()  # the output is read once nothing writes any more
        if pair.totals() != expected:
            result.problems.append("the running totals changed after they equalled the input")
        if feeder.failed:
            result.problems.append(f"feeder: {feeder.failed[:3]}")
        result.records_in, result.bad_in = cfg.records + feeder.good, feeder.bad
        _sink_output(bootstrap, sink, expected, result)
    except Exception as exc:
        log(f"{type(exc).__name__}: {exc}")  # with the processes' log tails
        result.problems.append(f"{type(exc).__name__}: {(str(exc) or ' ').splitlines()[0]}")
    finally:
        if pair is not None:
            pair.close()
        if own_broker:
            broker.stop(home)
        result.seconds = time.monotonic() - t0
    return result
