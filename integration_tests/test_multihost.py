"""Several hosts on one machine: broker, Spark master, two workers and a driver, each in
its own network namespace on a private bridge (walstream.testing.multihost_cluster).

What is proved here, for the multi-host tests that build on it: the hosts reach each
other and nothing outside 198.18.0.0/24; the workers and the master see neither the
repository nor the virtualenv; a job submitted from the driver host runs on both
workers with a Python shipped to them as an archive (``--archives``, the layout
venv-pack makes); a host can be killed as a power cut would; and every namespace,
link, mount and process goes away, also when the start fails midway.

Skips, printing why, where network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from walstream import procs
from walstream.testing import wait_until
from walstream.testing.multihost_cluster import MultiHostCluster
from walstream.testing.netns import NetLab, leftovers, log, namespaces_available, repository_root

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SYSTEM_PYTHON = Path("/usr/bin/python3")
OUTSIDE = ("192.0.2.1", "198.18.1.1", "8.8.8.8")  # never reached: no route leads there
JOB_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = namespaces_available()
    if reason is not None:
        print(f"multi-host tests skipped: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(namespaces: None) -> Iterator[MultiHostCluster]:
    c = MultiHostCluster(workers=2)
    run_id = c.lab.run_id
    try:
        yield c
    finally:
        started = time.monotonic()
        c.close()
        log(f"cluster closed in {time.monotonic() - started:.1f}s")
        assert leftovers(run_id) == []


def test_a_start_that_fails_midway_leaves_nothing(namespaces: None) -> None:
    seen: dict[str, object] = {}

    def fail(lab: NetLab, step: str) -> None:
        seen["run_id"] = lab.run_id
        if step == "spark master":
            seen["pids"] = [p for h in lab.hosts for p in lab.pids(h)]
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

repo, venv, driver_ip = sys.argv[1:4]


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
print("MHPROBE " + json.dumps(rows), flush=True)
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
        app, [str(repo), sys.prefix, cluster.ip("driver")],
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
    line = next(x for x in output.splitlines() if x.startswith("MHPROBE "))
    rows = json.loads(line.removeprefix("MHPROBE "))
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
