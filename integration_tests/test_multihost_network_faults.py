"""Network faults between the driver and the workers of the namespace cluster, while
input flows into a Kafka receiver stream and a direct stream (walstream.testing.
multihost_app's word count, submitted with spark-submit, executors on the
``walstream package`` archive):

1. the worker host running the receiver is cut off (its link down, its processes
   alive) for longer than the executor timeout: Spark drops its executor, the
   receiver relaunches on the other worker and resumes where the driver's log says;
   when the link comes back, the cut-off receiver is still running and may still
   hold blocks, and nothing of it may count twice;
2. the driver is parted from both workers for less than the executor timeout while
   every host still reaches the broker (blackhole routes between the driver and
   each worker): the receiver cannot report, keeps its source unacknowledged and
   reports once it can; batches of that time run late, none is lost;
3. the same app as two HA drivers, each on a host of its own and submitting to the
   one master: the leader parted from both workers for longer than the executor
   timeout while it still reaches the broker. It keeps renewing its lease, so the
   standby does not take over; Spark drops every executor of the leader, new ones
   register once the routes are back, and the batches of that time run then. Then
   the leader cut from the broker only (it still reaches the workers): it stops
   acting at its lease's deadline and exits, the standby takes over on its own
   executors, and the deposed leader completes no batch after it stopped.

At the end every output path holds every fed word exactly once per stream, with no
batch time written twice with different contents: the running totals, the user's
own per-batch outputs (totals per batch time in files, counts appended to a file)
and the KafkaSink topic read exactly once. Skips, printing why, where network
namespaces cannot be made.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from integration_tests.multihost_runs import (
    TAG_OF,
    WAIT_S,
    WordCountRun,
    packaged_env,
    skip_without_namespaces,
    tagged,
    two_worker_cluster,
    workers_up,
)
from integration_tests.netfault_lab import check_outputs
from walstream.testing import wait_until
from walstream.testing.multihost_cluster import MultiHostCluster
from walstream.testing.netfaults import NetFaults
from walstream.testing.netns import log

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

EXECUTOR_TIMEOUT_S = 20.0
#: Spark drops an executor it has not heard from for spark.network.timeout: short
#: here so a cut-off worker is dropped within the test's time.
FAST_LOSS = {"spark.network.timeout": f"{int(EXECUTOR_TIMEOUT_S)}s",
             "spark.network.timeoutInterval": "5s",  # how often the driver checks
             "spark.executor.heartbeatInterval": "2s"}
WORKER_CUT_S = EXECUTOR_TIMEOUT_S + 15.0
DRIVER_SHORT_PART_S = EXECUTOR_TIMEOUT_S / 2
RECORDS, RATE = 600, 20.0  # per phase and topic: 30 s of input
_ENDED = re.compile(r"receiver \d+ ended \((.{0,160}?)\); relaunching")


@pytest.fixture(scope="module")
def cluster() -> Iterator[MultiHostCluster]:
    skip_without_namespaces()
    yield from two_worker_cluster(drivers=("driver", "driverb"))


@pytest.fixture(scope="module")
def executor_env(cluster: MultiHostCluster) -> Iterator[Path]:
    yield from packaged_env()


def _report(fig: dict[str, Any]) -> None:
    shown = {k: f"{v:.1f} s" if isinstance(v, float) else str(v) for k, v in fig.items()}
    log("multi-host network faults: " + "; ".join(f"{k}: {v}" for k, v in shown.items()))
    print("\nmulti-host network faults:")
    for k, v in shown.items():
        print(f"  {k}: {v}")


def test_a_worker_cut_off_and_the_driver_parted_from_its_workers_lose_and_double_nothing(
        cluster: MultiHostCluster, executor_env: Path) -> None:
    workers_up(cluster)
    faults = NetFaults(cluster.lab)
    run = WordCountRun(cluster, executor_env, conf=FAST_LOSS, name="netfault",
                       per_batch_outputs=True)
    fig: dict[str, Any] = {}
    try:
        run.create_topics()
        run.feed(0, RECORDS, RATE)
        submitted = time.time()
        run.submit()
        wait_until(lambda: run.receiver_records_since(0) > 0
                   and any(run.host_of(r) for r in run.receivers()), WAIT_S,
                   "batches with the receiver's records, the receiver on a worker",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig["submit -> first batch with the receiver's records"] = time.time() - submitted

        # 1. The receiver's worker host cut off, its processes alive.
        receiver = next(r for r in reversed(run.receivers()) if run.host_of(r))
        victim = run.host_of(receiver)
        assert victim is not None
        survivor = next(w for w in cluster.worker_names if w != victim)
        cut_at = time.time()
        faults.cut(victim)
        run.feed(1, RECORDS, RATE)
        try:
            relaunched, first = run.wait_relaunched(survivor, cut_at)
            fig["worker cut -> receiver relaunched"] = relaunched - cut_at
            fig["worker cut -> its records in a batch"] = first - cut_at
            time.sleep(max(0.0, cut_at + WORKER_CUT_S - time.time()))
        finally:
            faults.heal(victim)
        healed_at = time.time()
        pid = int(receiver["executor"].rsplit(":", 1)[1])
        fig["cut-off receiver's process at the heal"] = (
            "alive" if pid in cluster.lab.pids(victim) else "gone")

        # 2. The driver parted from both workers for less than the executor timeout,
        # everyone still reaching the broker: the receiver's report waits on its
        # connection and goes through once the routes are back. (Longer than the
        # timeout: the HA test below, with a standby beside the driver.)
        name = f"parted {DRIVER_SHORT_PART_S:.0f} s"
        batches_before = len(run.batches())
        for w in cluster.worker_names:
            faults.block("driver", w)
        run.feed(2, RECORDS, RATE)
        try:
            time.sleep(DRIVER_SHORT_PART_S)
            fig[f"{name}: batches completed while parted"] = len(run.batches()) - batches_before
        finally:
            for w in cluster.worker_names:
                faults.unblock("driver", w)
        joined_at = time.time()
        wait_until(lambda: run.receiver_records_since(joined_at) > 0, WAIT_S,
                   "a batch with the receiver's records after the driver rejoined",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig[f"{name}: rejoined -> the receiver's records in a batch"] = time.time() - joined_at
        fig[f"{name}: receiver launches so far"] = len(run.receivers())

        # 3. Every word exactly once, per stream, in the totals and in the sink.
        fed = run.fed()
        fed_at = time.time()
        expected = tagged(fed)

        run.wait_totals_exact(expected)
        fig["input complete -> totals exact"] = time.time() - fed_at
        fig["worker healed -> totals exact"] = time.time() - healed_at
        # The batch that made the totals exact writes its other outputs after them:
        # one more completed batch means they are all written.
        done = len(run.batches())
        wait_until(lambda: len(run.batches()) > done, WAIT_S, "one more completed batch",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        output = run.output()
        sink = Counter({f"{tag} {w}": n for tag, words in output["counts"].items()
                        for w, n in words.items()})
        checks = check_outputs(run.out, sink, Counter(expected))
        for path, check in checks.items():
            fig[path] = str(check)
        for kind in run.topics:
            want, got = fed[kind]["expected"], Counter(output["counts"][TAG_OF[kind]])
            fig[f"{kind} stream in the sink: words in/out"] = (
                f"{sum(want.values())}/{sum(got.values())}")
        assert all(c.exact() for c in checks.values()), (
            "\n".join(f"{p}: {c}" for p, c in checks.items()) + f"\n{run.details()}")
        fig["receiver launches"] = len(run.receivers())
        fig["receiver job ends, as the driver logged them"] = _ENDED.findall(run.driver_log())
        assert run.app_exited() is None, run.details()
    finally:
        _report(fig)
        faults.heal_all()
        run.close()


#: Two HA drivers of one app: each takes one worker's cores, so both run at once.
HA_CONF = {**FAST_LOSS, "spark.walstream.ha.enabled": "true",
           "spark.walstream.ha.leaseTimeout": "2s", "spark.cores.max": "2"}
LEADER_PART_S = EXECUTOR_TIMEOUT_S + 10.0
BROKER_CUT_S = 20.0  # ten lease timeouts
_STOPPED = re.compile(r"^(\S+ \S+) ERROR walstream\.driver\.ha\.high_availability: "
                      r"high availability: this driver no longer leads", re.M)
_LEADS = re.compile(r"high availability: leading epoch (\d+)")
_STANDS_BY = re.compile(r"high availability: the lease of \S+ is held .*: standing by")


def test_a_leader_parted_from_its_workers_keeps_its_lease_and_one_parted_from_the_broker_stops(
        cluster: MultiHostCluster, executor_env: Path) -> None:
    workers_up(cluster)
    faults = NetFaults(cluster.lab)
    run = WordCountRun(cluster, executor_env, conf=HA_CONF, name="haparted",
                       per_batch_outputs=True)
    fig: dict[str, Any] = {}

    def log_of(app: Any) -> str:
        return cluster.lab.log_tail(app, 1_000_000)

    try:
        run.create_topics()
        run.feed(0, RECORDS, RATE)
        leader = run.submit("driver")
        wait_until(lambda: _LEADS.search(log_of(leader)) is not None
                   and run.receiver_records_since(0) > 0, WAIT_S,
                   "the driver on host driver to lead and run the receiver's records",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        standby = run.submit("driverb")
        wait_until(lambda: _STANDS_BY.search(log_of(standby)) is not None, WAIT_S,
                   "the driver on host driverb to stand by", poll_s=0.5,
                   abort=run.app_exited, details=run.details)

        batches_before = len(run.batches())
        parted_at = time.time()
        for w in cluster.worker_names:
            faults.block("driver", w)
        run.feed(1, RECORDS, RATE)
        try:
            time.sleep(LEADER_PART_S)
            fig["batches completed while parted"] = len(run.batches()) - batches_before
        finally:
            for w in cluster.worker_names:
                faults.unblock("driver", w)
        joined_at = time.time()
        fig["parted for"] = joined_at - parted_at
        wait_until(lambda: run.receiver_records_since(joined_at) > 0, WAIT_S,
                   "a batch with the receiver's records after the leader rejoined",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig["rejoined -> the receiver's records in a batch"] = time.time() - joined_at
        # The leader kept renewing through the broker: no takeover, no second leader.
        assert "took over" not in log_of(standby) and leader.poll() is None, run.details()
        fig["after the part: standby took over"] = False

        # Then the leader cut from the broker only (it still reaches the workers and
        # the master): its lease runs out, it stops acting at its deadline and exits;
        # the standby takes over and runs the app on its own executors.
        leader_pid = run.batches()[-1]["pid"]
        cut_at = time.time()
        faults.block("driver", "broker")
        run.feed(2, RECORDS, RATE)
        try:
            wait_until(lambda: "took over" in log_of(standby), WAIT_S,
                       "the standby to take over", poll_s=0.5, abort=run.app_exited,
                       details=run.details)
            fig["leader apart from the broker -> standby leading"] = time.time() - cut_at
            time.sleep(max(0.0, cut_at + BROKER_CUT_S - time.time()))
        finally:
            faults.unblock("driver", "broker")
        wait_until(lambda: leader.poll() is not None, WAIT_S, "the deposed leader to exit",
                   poll_s=0.5, details=run.details)
        stopped = _STOPPED.search(log_of(leader))
        assert stopped, f"the deposed leader never said it stopped leading\n{run.details()}"
        stopped_at = datetime.strptime(stopped[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        fig["leader apart from the broker -> it stopped acting"] = stopped_at - cut_at
        wait_until(lambda: any(b["pid"] != leader_pid and b["records"].get(
            str(run.receiver_stream()), 0) for b in run.batches(cut_at)), WAIT_S,
            "a batch of the new leader with the receiver's records", poll_s=0.5,
            abort=run.app_exited, details=run.details)
        fig["leader apart from the broker -> new leader's batch with receiver records"] = (
            time.time() - cut_at)
        late = [b for b in run.batches(stopped_at + 1.0) if b["pid"] == leader_pid]

        fed = run.fed()
        fed_at = time.time()
        expected = tagged(fed)
        run.wait_totals_exact(expected)
        fig["input complete -> totals exact"] = time.time() - fed_at
        done = len(run.batches())
        wait_until(lambda: len(run.batches()) > done, WAIT_S, "one more completed batch",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        output = run.output()
        sink = Counter({f"{tag} {w}": n for tag, words in output["counts"].items()
                        for w, n in words.items()})
        checks = check_outputs(run.out, sink, Counter(expected))
        for path, check in checks.items():
            fig[path] = str(check)
        fig["drivers that completed batches"] = len({b["pid"] for b in run.batches()})
        assert all(c.exact() for c in checks.values()) and not late, (
            "\n".join(f"{p}: {c}" for p, c in checks.items())
            + f"\nbatches the deposed leader completed after it stopped: {late}\n"
            + run.details())
    finally:
        _report(fig)
        faults.heal_all()
        run.close()
