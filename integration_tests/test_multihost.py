"""Several hosts on one machine: broker, Spark master, two workers and a driver, each in
its own network namespace on a private bridge (walstream.testing.multihost_cluster).

What is proved here, for the multi-host tests that build on it: the hosts reach each
other and nothing outside 198.18.0.0/24; the workers and the master see neither the
repository nor the virtualenv; a job submitted from the driver host runs on both
workers with a Python shipped to them as an archive (``--archives``, the layout
venv-pack makes); a host can be killed as a power cut would; and every namespace,
link, mount and process goes away, also when the start fails midway.

The full proof (issue 27 item 5): through spark-submit, a Kafka word count with a
receiver stream and a direct stream (walstream.testing.multihost_app) runs on executors
that get their Python from ``walstream package``; every process of the worker host
running the receiver is SIGKILLed mid-run (the receiver relaunches on the other) and
the driver host's too (getOrCreate restarts it); the totals are exact per stream, and
a forged Register and AddBlock from the broker host, without the application's
secret, are refused.

And a Structured Streaming query over ``format("walstream")`` submitted the same way
(the source's Kafka receiver and the block reads run on the executors, from the
archive): the worker host running its receiver is SIGKILLed mid-run, the receiver
relaunches on the other, and the KafkaSink output written by ``foreachBatch`` holds
every fed word exactly once.

Skips, printing why, where network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.multihost_runs import (
    TAG_OF,
    WAIT_S,
    QueryRun,
    WordCountRun,
    jsonl,
    packaged_env,
    skip_without_namespaces,
    tagged,
    two_worker_cluster,
    workers_up,
)
from walstream import procs
from walstream.testing import wait_until
from walstream.testing.multihost_cluster import MultiHostCluster
from walstream.testing.netns import NetLab, leftovers, log, repository_root

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SYSTEM_PYTHON = Path("/usr/bin/python3")
OUTSIDE = ("192.0.2.1", "198.18.1.1", "8.8.8.8")  # never reached: no route leads there
JOB_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def namespaces() -> None:
    skip_without_namespaces()


@pytest.fixture(scope="module")
def cluster(namespaces: None) -> Iterator[MultiHostCluster]:
    yield from two_worker_cluster()


def test_a_start_that_fails_midway_leaves_nothing(namespaces: None) -> None:
    seen: dict[str, object] = {}

    def fail(lab: NetLab, step: str) -> None:
        seen["run_id"] = lab.run_id
        if step == "spark master":
            def pids() -> list[int]:
                return [p for h in lab.hosts for p in lab.pids(h)]

            # A process just started is in its host's namespace once `ip netns exec`
            # has entered it, a moment after it was spawned.
            wait_until(lambda: len(pids()) >= 2, 10, "broker and master in their hosts",
                       poll_s=0.05)
            seen["pids"] = pids()
            raise RuntimeError("injected failure")

    with pytest.raises(RuntimeError, match="injected failure"):
        MultiHostCluster(workers=2, on_step=fail)
    pids = seen["pids"]
    assert isinstance(pids, list) and len(pids) >= 2, pids  # broker, master (+ launcher)
    assert [p for p in pids if procs.pid_alive(p)] == []
    assert leftovers(str(seen["run_id"])) == []


def test_hosts_reach_each_other_and_nothing_else(cluster: MultiHostCluster) -> None:
    assert cluster.call("driver", ["ip", "-o", "addr", "show", "dev", "eth0"]).stdout.count(
        "inet ") == 1
    bridge_addrs = subprocess.run(["ip", "-o", "addr", "show", "dev", cluster.lab.bridge],
                                  capture_output=True, text=True, check=True).stdout
    assert bridge_addrs.strip() == "", "the bridge has an address: the host machine is reachable"
    for name, host in cluster.hosts.items():
        routes = cluster.call(name, ["ip", "-4", "route", "show"]).stdout.strip().splitlines()
        assert routes == [f"198.18.0.0/24 dev eth0 proto kernel scope link src {host.ip}"], \
            (name, routes)
        assert cluster.call(name, ["ip", "-6", "route", "show"]).stdout.strip() == ""
    for addr in OUTSIDE:
        res = cluster.call("driver", ["ip", "route", "get", addr])
        assert res.returncode != 0 and "unreachable" in res.stderr, (addr, res)
    # A connect fails at once, before any packet: there is no route to send it on.
    probe = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], 80), timeout=5)\n"
             "except OSError as e:\n"
             "    print(e.errno)\n")
    res = cluster.call("driver", [str(SYSTEM_PYTHON), "-c", probe, OUTSIDE[0]])
    assert res.stdout.strip() == "101", res  # ENETUNREACH
    for name in ("master", "worker2", "driver"):
        assert cluster.port_open(cluster.ip("broker"), 9092, from_host=name), name
    assert cluster.port_open(cluster.ip("master"), 7077, from_host="worker1")
    # Each host's loopback is its own: the broker is not on the driver's 127.0.0.1.
    assert not cluster.port_open("127.0.0.1", 9092, from_host="driver")


def test_the_broker_serves_kafka_to_the_driver_host(cluster: MultiHostCluster) -> None:
    script = (
        "import sys\n"
        "from confluent_kafka import Producer\n"
        "from confluent_kafka.admin import AdminClient\n"
        "conf = {'bootstrap.servers': sys.argv[1]}\n"
        "md = AdminClient(conf).list_topics(timeout=20)\n"
        "print('brokers', sorted(f'{b.host}:{b.port}' for b in md.brokers.values()))\n"
        "acked = []\n"
        "p = Producer({**conf, 'acks': 'all'})\n"
        "p.produce('multihost-probe', b'hello', partition=0,\n"
        "          on_delivery=lambda err, msg: acked.append(err is None))\n"
        "p.flush(20)\n"
        "print('acked', acked)\n"
    )
    res = cluster.call("driver", [sys.executable, "-c", script, cluster.broker_bootstrap],
                       timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"brokers ['{cluster.broker_bootstrap}']" in res.stdout, res.stdout
    assert "acked [True]" in res.stdout, res.stdout


def test_master_and_workers_see_neither_repository_nor_virtualenv(
        cluster: MultiHostCluster) -> None:
    repo = repository_root()
    assert repo is not None
    venv = Path(sys.prefix)
    look = (f"ls -A {repo} | wc -l; test -e {venv}/bin/python && echo venv; "
            f"test -x {cluster.spark_home}/bin/spark-class && echo spark; "
            "test -x /usr/bin/java && echo java")
    for name in ("master", *cluster.worker_names):
        # In the mount namespace of the running daemon, and in a new process on that host.
        pid = cluster.procs[name].pid
        assert "java" in procs.cmdline(pid), procs.cmdline(pid)
        inside = subprocess.run(["nsenter", "--target", str(pid), "--mount", "--net", "--",
                                 "sh", "-c", look], capture_output=True, text=True, check=True)
        assert inside.stdout.split() == ["0", "spark", "java"], (name, inside.stdout)
        fresh = cluster.call(name, ["sh", "-c", look])
        assert fresh.stdout.split() == ["0", "spark", "java"], (name, fresh.stdout)
    for name in ("driver", "broker"):
        seen = cluster.call(name, ["sh", "-c", look]).stdout.split()
        assert seen[0] != "0" and "venv" in seen, (name, seen)


PROBE_APP = '''
import json, os, socket, sys, time
from pyspark import SparkConf, SparkContext

repo, venv, driver_ip, out = sys.argv[1:5]


def probe(i):
    time.sleep(0.3)  # long enough that both executors take tasks
    try:
        import walstream  # noqa: F401
        project = "importable"
    except ImportError:
        project = "absent"
    import mhprobe
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((driver_ip, 9))  # a UDP connect only picks the source address
    ip = s.getsockname()[0]
    s.close()
    return {"ip": ip, "executable": sys.executable, "prefix": sys.prefix,
            "cwd": os.getcwd(), "token": mhprobe.TOKEN, "project": project,
            "repo_visible": os.path.exists(os.path.join(repo, "pyproject.toml")),
            "venv_visible": os.path.exists(os.path.join(venv, "bin", "python")),
            "repo_listing": os.listdir(repo) if os.path.isdir(repo) else None,
            "version": list(sys.version_info[:2])}


sc = SparkContext(conf=SparkConf().setAppName("walstream-multihost-probe"))
rows = sc.parallelize(range(16), 16).map(probe).collect()
# To a file, not stdout: spark-submit copies the Python driver's stdout into its own
# in pieces, and a log line of the JVM's can land inside a long line.
with open(out + ".tmp", "w") as f:
    json.dump(rows, f)
os.replace(out + ".tmp", out)
sc.stop()
'''


def _python_archive(tmp: Path, token: str) -> Path:
    """A relocatable Python environment as venv-pack lays it out: a venv over the system
    Python with one module, packed with paths relative to its root."""
    env_dir = tmp / "environment"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(env_dir)],
                   check=True, capture_output=True)
    site = next(env_dir.glob("lib/python3*/site-packages"))
    (site / "mhprobe.py").write_text(f"TOKEN = {token!r}\n")
    archive = tmp / "probe-env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env_dir, arcname=".")
    return archive


def test_a_job_from_the_driver_host_runs_on_both_workers_with_shipped_python(
        cluster: MultiHostCluster, tmp_path: Path) -> None:
    version = subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True)
    if version.stdout.strip() != str(tuple(sys.version_info[:2])):
        pytest.skip(f"{SYSTEM_PYTHON} is not Python {sys.version_info[:2]} "
                    "(PySpark needs the same minor version on driver and executors)")
    token = f"shipped-{time.monotonic_ns()}"
    archive = _python_archive(tmp_path, token)
    app = tmp_path / "probe_app.py"
    app.write_text(PROBE_APP)
    repo = repository_root()
    started = time.monotonic()
    proc = cluster.spark_submit(
        app, [str(repo), sys.prefix, cluster.ip("driver"), str(tmp_path / "probe.json")],
        archives=[f"{archive}#environment"],
        conf={"spark.pyspark.python": "./environment/bin/python"})
    try:
        proc.wait(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"spark-submit ran over {JOB_TIMEOUT_S}s:\n{cluster.lab.log_tail(proc, 60)}")
    log(f"spark-submit finished in {time.monotonic() - started:.1f}s")
    output = cluster.lab.log_path(proc).read_text(errors="replace")
    assert proc.returncode == 0, "\n".join(output.splitlines()[-60:])
    rows = json.loads((tmp_path / "probe.json").read_text())
    assert len(rows) == 16
    worker_ips = {cluster.ip(w): w for w in cluster.worker_names}
    assert {r["ip"] for r in rows} == set(worker_ips), rows
    for r in rows:
        home = cluster.lab.host_dir(worker_ips[r["ip"]]) / "work"
        assert Path(r["cwd"]).is_relative_to(home), r
        assert r["executable"] == f"{r['cwd']}/environment/bin/python", r
        assert r["prefix"] == f"{r['cwd']}/environment", r
        assert r["token"] == token
        assert r["project"] == "absent" and not r["repo_visible"] and not r["venv_visible"], r
        assert r["repo_listing"] in ([], None), r  # an empty, read-only directory covers it


def test_kill_host_kills_every_process_of_a_worker(cluster: MultiHostCluster) -> None:
    # Besides the worker JVM: a process in its own session, as a detached daemon would be.
    cluster.run("worker2", ["sh", "-c", "setsid sleep 300 & exec sleep 301"], name="sleeps")
    wait_until(lambda: len(cluster.lab.pids("worker2")) >= 3, 10, "the sleeps on worker2",
               poll_s=0.05)
    before = cluster.lab.pids("worker2")
    killed = cluster.kill_host("worker2")
    assert set(before) <= set(killed)
    assert cluster.lab.pids("worker2") == []
    assert cluster.procs["worker2"].poll() is not None
    # The master sees the worker's connection drop at once (no heartbeat timeout).
    started = time.monotonic()
    wait_until(lambda: cluster.alive_workers() == 1, 60, "the master to drop worker2",
               poll_s=0.5)
    log(f"master dropped the killed worker after {time.monotonic() - started:.1f}s")
    # The host's network stays: it can run processes again.
    assert cluster.call("worker2", ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]
                        ).stdout.count(cluster.ip("worker2")) == 1


# -- the full proofs: apps through spark-submit, a worker host (and the driver) killed --


@pytest.fixture(scope="module")
def executor_env(namespaces: None) -> Iterator[Path]:
    yield from packaged_env()


def test_wordcount_through_spark_submit_survives_a_worker_host_and_the_driver_dying(
        cluster: MultiHostCluster, executor_env: Path) -> None:
    test_started = time.monotonic()
    workers_up(cluster)
    run = WordCountRun(cluster, executor_env)
    fig: dict[str, Any] = {}
    try:
        run.create_topics()
        run.feed(0)
        submitted = time.time()
        run.submit()
        wait_until(lambda: bool(run.batches(submitted)) and run.receiver_records_since(0) > 0
                   and any(run.host_of(r) for r in run.receivers()), WAIT_S,
                   "batches with the receiver's records, the receiver on a worker",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig["submit -> first batch"] = run.batches(submitted)[0]["wall"] - submitted

        # 1. Power cut on the worker host running the receiver.
        receiver = next(r for r in reversed(run.receivers()) if run.host_of(r))
        victim = run.host_of(receiver)
        assert victim is not None
        survivor = next(w for w in cluster.worker_names if w != victim)
        killed_at = time.time()
        fig["worker host kill"] = f"{victim}: {len(cluster.kill_host(victim))} processes"
        run.feed(1)
        relaunched, first = run.wait_relaunched(survivor, killed_at)
        fig["worker kill -> receiver relaunched"] = relaunched - killed_at
        fig["worker kill -> its records in a batch"] = first - killed_at
        cluster.start_worker(victim)  # the host is back, for the restarted driver

        # 2. Power cut on the driver host, then the same spark-submit again.
        killed_at = time.time()
        feeding = run.feeds[-1].poll() is None
        fig["driver host kill"] = (f"{len(cluster.kill_host('driver'))} processes, "
                                   f"{'while' if feeding else 'after'} feeding")
        assert run.app is not None and run.app.poll() is not None
        run.feed(2)
        restarted = time.time()
        run.submit()
        wait_until(lambda: bool(run.started(restarted)) and bool(run.batches(restarted))
                   and any(run.host_of(r) for r in run.receivers(restarted)),
                   WAIT_S, "the restarted driver's first batch and receiver",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig["restart -> context started"] = run.started(restarted)[0]["wall"] - restarted
        fig["restart -> first batch"] = run.batches(restarted)[0]["wall"] - restarted
        fig["restart -> receiver registered"] = run.receivers(restarted)[0]["wall"] - restarted
        # Restored, not started afresh: it runs the batches whose time passed while it
        # was down (a new context's first batch is one interval after its start).
        up = run.started(restarted)[0]["wall"]
        assert any(b["batch"] < up * 1000 for b in run.batches(restarted)), \
            f"the restarted driver ran no batch of its down time:\n{run.details()}"

        # 3. Forged receiver calls from the broker host, without the application's secret.
        forged = run.forge()
        for call, answer in forged.items():
            assert answer["refused"], f"{call} was not refused: {answer}"
            assert answer["error"] == "EndpointAuthError", (call, answer)
            assert answer["code"] == "UNAUTHENTICATED", (call, answer)
        fig["forged calls refused"] = ", ".join(sorted(forged))

        # 4. Every word exactly once: in the running totals and in the sink.
        fed = run.fed()
        fed_at = time.time()
        expected = tagged(fed)

        run.wait_totals_exact(expected)
        fig["input complete -> totals exact"] = time.time() - fed_at
        output = run.output()
        # The totals are written by the batch's last output operation, after its sink
        # job: a batch whose sink job failed still writes exact totals, and then the
        # app stops (awaitTermination raises the batch's error, as Spark's does) with
        # that batch pending for a restart. Its sink output is then missing, for a
        # reason this names, not a lost block.
        exited = run.app_exited()
        assert exited is None, (f"the app stopped after its totals were exact ({exited}): a "
                                f"batch failed\n{run.details()}")
        for kind in run.topics:
            want, got = fed[kind]["expected"], Counter(output["counts"][TAG_OF[kind]])
            lost, doubled = sum((want - got).values()), sum((got - want).values())
            fig[f"{kind} stream: lines good/bad, words in/out, lost/doubled"] = (
                f"{fed[kind]['good']}/{fed[kind]['bad']}, {sum(want.values())}/"
                f"{sum(got.values())}, {lost}/{doubled}")
            assert got == want, (f"{kind} stream: {lost} words lost, {doubled} doubled; "
                                 f"sink batches {output['batches']}, torn attempts "
                                 f"{output['torn attempts']}\n{run.batches_run_twice()}\n"
                                 f"{run.details()}")
        fig["batches in the sink"] = output["batches"]
        fig["sink attempts with a marker but torn"] = len(output["torn attempts"])
        fig["batches of the down time run by the restarted driver"] = sum(
            1 for b in run.batches(restarted) if b["batch"] < up * 1000)
        fig["bad records reported by receivers"] = len(jsonl(run.out / "errors.jsonl"))
        fig["test time"] = time.monotonic() - test_started
    finally:
        print("\nmulti-host word count:")
        for k, v in fig.items():
            print(f"  {k}: {f'{v:.1f} s' if isinstance(v, float) else v}")
        run.close()


def test_a_structured_query_from_the_archive_survives_a_worker_host_dying(
        cluster: MultiHostCluster, executor_env: Path) -> None:
    """``format("walstream")`` on the cluster: the source's Kafka receiver and the
    micro-batches' block reads run on executors whose only walstream is the archive;
    every process of the worker host running the receiver is SIGKILLed mid-run; the
    receiver relaunches on the other host, and the KafkaSink output, read exactly
    once, holds every fed word once."""
    test_started = time.monotonic()
    workers_up(cluster)
    run = QueryRun(cluster, executor_env)
    fig: dict[str, Any] = {}
    try:
        run.create_topics()
        # Submitted from a directory where ./environment/bin/python does not resolve:
        # the driver could not start the source's planning worker. A clear error at
        # register(), before any receiver starts.
        refused = run.submit(link_environment=False)
        refused.wait(timeout=WAIT_S)
        said = cluster.lab.log_tail(refused, 200)
        assert refused.returncode != 0 and "SourceOptionError" in said \
            and "ln -s" in said, said
        run.feed(0)
        submitted = time.time()
        run.submit()
        wait_until(lambda: run.records_since(submitted) > 0
                   and any(s["worker"] for s in run.receiver_starts()), WAIT_S,
                   "micro-batches with the receiver's records, the receiver on a worker",
                   poll_s=0.5, abort=run.app_exited, details=run.details)
        fig["submit -> first micro-batch with records"] = next(
            b["wall"] for b in run.batches(submitted) if b["records"]) - submitted

        # A power cut on the worker host running the receiver, with input flowing.
        starts = run.receiver_starts()
        victim = next(s["worker"] for s in reversed(starts) if s["worker"])
        survivor = next(w for w in cluster.worker_names if w != victim)
        killed_at = time.time()
        fig["worker host kill"] = f"{victim}: {len(cluster.kill_host(victim))} processes"
        run.feed(1)
        wait_until(lambda: any(s["worker"] == survivor
                               for s in run.receiver_starts()[len(starts):]),
                   WAIT_S, f"the receiver to be relaunched on {survivor}", poll_s=0.5,
                   abort=run.app_exited, details=run.details)
        relaunched_seen = time.time()
        fig["worker kill -> receiver relaunched (seen by the test)"] = relaunched_seen - killed_at
        wait_until(lambda: run.records_since(relaunched_seen) > 0, WAIT_S,
                   "a micro-batch with records of the relaunched receiver", poll_s=0.5,
                   abort=run.app_exited, details=run.details)
        fig["worker kill -> a later micro-batch with records"] = next(
            b["wall"] for b in run.batches(relaunched_seen) if b["records"]) - killed_at
        cluster.start_worker(victim)

        # Every word exactly once in the sink.
        fed = run.fed()
        fed_at = time.time()
        want = fed["structured"]["expected"]
        seen: dict[str, Any] = {}

        def sink_exact() -> bool:
            seen.update(run.output())
            return Counter(seen["counts"]["s"]) == want

        def over_or_exited() -> str | None:
            got = Counter(seen.get("counts", {}).get("s", {}))
            over = {w: n for w, n in got.items() if n > want.get(w, 0)}
            return f"sink over the input: {over}" if over else run.app_exited()

        wait_until(sink_exact, WAIT_S, "the sink to hold every fed word once", poll_s=2.0,
                   progress=lambda: len(run.batches()), stall_s=60, abort=over_or_exited,
                   details=lambda: f"missing {want - Counter(seen['counts']['s'])}\n"
                                   + run.details())
        fig["input complete -> sink exact"] = time.time() - fed_at
        got = Counter(seen["counts"]["s"])
        fig["lines good/bad, words in/out"] = (
            f"{fed['structured']['good']}/{fed['structured']['bad']}, "
            f"{sum(want.values())}/{sum(got.values())}")
        fig["micro-batches in the sink"] = seen["batches"]
        fig["sink attempts with a marker but torn"] = len(seen["torn attempts"])
        assert run.app_exited() is None, f"the query stopped\n{run.details()}"
        assert got == want
        fig["test time"] = time.monotonic() - test_started
    finally:
        print("\nmulti-host Structured query:")
        for k, v in fig.items():
            print(f"  {k}: {f'{v:.1f} s' if isinstance(v, float) else v}")
        run.close()
