"""The applications the multi-host tests submit to the namespace cluster, each as a
run: its topics, the feeds from the broker host, its spark-submit runs and what
it writes (walstream.testing.multihost_app is what runs)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from walstream.testing import multihost_app
from walstream.testing.multihost_cluster import MultiHostCluster
from walstream.testing.netns import leftovers, log, namespaces_available
from walstream.testing.waiting import wait_until

BATCH_S = 2.0
ENDPOINT_PORT = 17400  # the driver's receiver endpoint; fixed so the forger can dial it
#: Records per input topic and their rate, fed from the broker host: from the start,
#: from the worker host's kill (on past the driver's kill), from the driver's kill.
PHASES = ((400, 20.0), (400, 20.0), (300, 30.0))
WAIT_S = 180  # bound on each wait of a run
TAG_OF = multihost_app.TAGS
#: The driver's line for each receiver registration it accepts.
_RECEIVER_STARTED = re.compile(r"receiver (\d+) started on (\S+) \(executor (\S+)\)")


def skip_without_namespaces() -> None:
    """Skip, printing why, where network namespaces cannot be made."""
    reason = namespaces_available()
    if reason is not None:
        print(f"multi-host tests skipped: {reason}")
        pytest.skip(reason)


def two_worker_cluster(drivers: tuple[str, ...] = ("driver",)) -> Iterator[MultiHostCluster]:
    """A module's cluster: stopped after its last test, with nothing of it left."""
    # Two cores a worker: after one worker host dies, the other runs the relaunched
    # receiver and still has a core for batches.
    c = MultiHostCluster(workers=2, worker_cores=2, drivers=drivers)
    run_id = c.lab.run_id
    try:
        yield c
    finally:
        started = time.monotonic()
        c.close()
        log(f"cluster closed in {time.monotonic() - started:.1f}s")
        assert leftovers(run_id) == []


def packaged_env() -> Iterator[Path]:
    """The executors' environment, built once per module by ``walstream package``."""
    from walstream import packaging

    with tempfile.TemporaryDirectory(prefix="walstream-mh-env-") as tmp:
        started = time.monotonic()
        archive = packaging.build(Path(tmp) / "env.tar.gz")
        log(f"walstream package built {archive.stat().st_size / 2**20:.1f} MiB in "
            f"{time.monotonic() - started:.1f}s")
        yield archive


def workers_up(cluster: MultiHostCluster) -> None:
    """Every worker host running (an earlier test may have killed one), each with the
    interpreter ``walstream package``'s bin/python links to."""
    for w in cluster.worker_names:
        if cluster.procs[w].poll() is not None:
            cluster.start_worker(w)
    # venv-pack's bin/python links to the interpreter the driver's venv was made from:
    # installed on every host (the repository and the venv are not).
    python = (Path(sys.base_prefix) / "bin"
              / f"python{sys.version_info.major}.{sys.version_info.minor}")
    for w in cluster.worker_names:
        assert cluster.call(w, ["test", "-x", str(python)]).returncode == 0, (w, python)


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


def last_json(text: str) -> Any:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in:\n{text[-3000:]}")


def tagged(fed: dict[str, Any]) -> dict[str, int]:
    """``{"<tag> <word>": count}`` of what was fed, per stream kind."""
    return {f"{TAG_OF[kind]} {w}": n for kind, f in fed.items() for w, n in f["expected"].items()}


class ClusterRun:
    """One application on ``cluster``: input topics per stream kind, a sink topic,
    feeds, spark-submit runs on the driver host, and an output directory."""

    def __init__(self, cluster: MultiHostCluster, env_archive: Path, name: str,
                 topics: dict[str, str], sink: str, conf: dict[str, str] | None = None
                 ) -> None:
        self.cluster = cluster
        self.conf = dict(conf or {})  # Spark settings over the run's own
        self.env_archive = env_archive
        self.work = cluster.lab.run_dir / f"{name}-{time.monotonic_ns()}"
        self.ckpt, self.out = self.work / "ckpt", self.work / "out"
        self.out.mkdir(parents=True)
        self.topics = topics
        self.sink = sink
        self.feeds: list[subprocess.Popen[bytes]] = []
        self.app: subprocess.Popen[bytes] | None = None
        self.apps: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        return self.cluster.broker_bootstrap

    def tool(self, *args: str, timeout: float = 60) -> Any:
        """``multihost_app <args>`` on the broker host (it sees the repository); its JSON."""
        res = self.cluster.call("broker", [sys.executable, "-m", "walstream.testing.multihost_app",
                                           *args], timeout=timeout)
        assert res.returncode == 0, f"multihost_app {args[0]} failed:\n{res.stderr[-3000:]}"
        return last_json(res.stdout)

    def create_topics(self) -> None:
        self.tool("topics", "--bootstrap", self.bootstrap, *self.topics.values(), self.sink)

    def feed(self, phase: int, records: int | None = None, rate: float | None = None) -> None:
        """Phase ``phase``'s input into every topic from the broker host (its own seed
        per phase and topic); ``records`` at ``rate`` a second over ``PHASES``'."""
        records = PHASES[phase][0] if records is None else records
        rate = PHASES[phase][1] if rate is None else rate
        self.feeds.append(self.cluster.run("broker", [
            sys.executable, "-m", "walstream.testing.multihost_app", "feed",
            "--bootstrap", self.bootstrap, "--records", str(records), "--rate", str(rate),
            *[a for i, t in enumerate(self.topics.values())
              for a in ("--topic", f"{t}:{100 * (phase + 1) + i}")]], name=f"feed-{phase}"))

    def fed(self) -> dict[str, Any]:
        """What the broker acknowledged, summed over the feeds, per stream."""
        fed: dict[str, Any] = {k: {"expected": Counter(), "good": 0, "bad": 0}
                               for k in self.topics}
        for p in self.feeds:
            p.wait(timeout=WAIT_S)
            log_text = self.cluster.lab.log_path(p).read_text(errors="replace")
            assert p.returncode == 0, log_text[-3000:]
            report = last_json(log_text)
            for kind, topic in self.topics.items():
                assert report[topic]["failed"] == [], report[topic]["failed"]
                fed[kind]["expected"].update(report[topic]["expected"])
                fed[kind]["good"] += report[topic]["good"]
                fed[kind]["bad"] += report[topic]["bad"]
        return fed

    def spark_submit(self, command: str, *args: str, cwd: Path | None = None,
                     host: str = "driver") -> subprocess.Popen[bytes]:
        """``multihost_app <command> CKPT OUT --bootstrap B <args>`` through spark-submit
        from the driver host ``host`` (in ``cwd`` when given), executors on the
        ``walstream package`` archive."""
        self.app = self.cluster.spark_submit(
            Path(multihost_app.__file__),
            [command, str(self.ckpt), str(self.out), "--bootstrap", self.bootstrap, *args],
            archives=[f"{self.env_archive}#environment"],
            conf={"spark.pyspark.python": "./environment/bin/python",
                  "spark.walstream.kafka.bootstrapServers": self.bootstrap,
                  "spark.walstream.endpoint.port": str(ENDPOINT_PORT), **self.conf},
            env={"PYSPARK_DRIVER_PYTHON": sys.executable}, cwd=cwd, host=host)
        self.apps.append(self.app)
        return self.app

    def app_exited(self) -> str | None:
        """Why the run stopped: every spark-submit it started has exited (a driver
        the test killed, or a deposed leader, with another running is no stop)."""
        if self.apps and all(app.poll() is not None for app in self.apps):
            return f"spark-submit exited with {self.apps[-1].returncode}"
        return None

    def driver_log(self) -> str:
        """Every spark-submit run's output, oldest first."""
        return "\n".join(self.cluster.lab.log_tail(app, 1_000_000) for app in self.apps)

    def errors(self) -> str:
        errors = [f"[driver {i + 1}] {line}" for i, app in enumerate(self.apps)
                  for line in self.cluster.lab.log_tail(app, 100_000).splitlines()
                  if ("failed" in line or "ERROR" in line) and "HashSet()" not in line]
        tail = self.cluster.lab.log_tail(self.app, 60) if self.app is not None else ""
        return ("--- the app's errors:\n" + "\n".join(errors[-40:]) +
                f"\n--- spark-submit ({len(self.apps)}):\n{tail}")

    def batches(self, since: float = 0.0) -> list[dict[str, Any]]:
        return [b for b in jsonl(self.out / "progress.jsonl") if b["wall"] >= since]

    def worker_of(self, pid: int) -> str | None:
        """The worker host whose processes include ``pid``."""
        for w in self.cluster.worker_names:
            if pid in self.cluster.lab.pids(w):
                return w
        return None

    def output(self) -> dict[str, Any]:
        return dict(self.tool("read", "--bootstrap", self.bootstrap, "--sink", self.sink,
                              timeout=120))

    def close(self) -> None:
        """Kill what the run started that still runs (the driver host holds only the
        app) and remove its files (copied first to ``$WALSTREAM_KEEP_RUN_DIR``, with
        the drivers' logs, when that is set)."""
        for host in self.cluster.driver_names:
            if any(app.poll() is None for app in self.apps):
                self.cluster.kill_host(host)
        for p in self.feeds:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        keep = os.environ.get("WALSTREAM_KEEP_RUN_DIR")
        if keep:
            dest = Path(keep) / self.work.name
            shutil.copytree(self.work, dest, dirs_exist_ok=True, ignore_dangling_symlinks=True)
            for i, app in enumerate(self.apps):
                with contextlib.suppress(OSError, KeyError):
                    shutil.copy(self.cluster.lab.log_path(app), dest / f"driver-{i + 1}.log")
        shutil.rmtree(self.work, ignore_errors=True)


class WordCountRun(ClusterRun):
    """multihost_app's DStream word count: a receiver and a direct stream."""

    def __init__(self, cluster: MultiHostCluster, env_archive: Path,
                 conf: dict[str, str] | None = None, name: str = "wordcount",
                 per_batch_outputs: bool = False) -> None:
        super().__init__(cluster, env_archive, name,
                         {"receiver": f"{name}-receiver", "direct": f"{name}-direct"},
                         f"{name}-counts", conf)
        self.per_batch_outputs = per_batch_outputs

    @property
    def endpoint(self) -> str:
        return f"{self.cluster.ip('driver')}:{ENDPOINT_PORT}"

    def submit(self, host: str = "driver") -> subprocess.Popen[bytes]:
        return self.spark_submit("app", "--receiver-topic", self.topics["receiver"],
                                 "--direct-topic", self.topics["direct"], "--sink", self.sink,
                                 "--batch", str(BATCH_S),
                                 *(["--per-batch-outputs"] if self.per_batch_outputs else []),
                                 host=host)

    def details(self) -> str:
        return (f"receivers: {self.receivers()}\nbatches completed: {len(self.batches())}\n"
                + self.errors())

    def receivers(self, since: float = 0.0) -> list[dict[str, Any]]:
        return [r for r in jsonl(self.out / "receivers.jsonl") if r["wall"] >= since]

    def started(self, since: float = 0.0) -> list[dict[str, Any]]:
        return [r for r in jsonl(self.out / "started.jsonl") if r["wall"] >= since]

    def host_of(self, receiver: dict[str, Any]) -> str | None:
        """The worker host whose processes include the receiver's Python worker."""
        return self.worker_of(int(receiver["executor"].rsplit(":", 1)[1]))

    def receiver_stream(self) -> int:
        return int(self.receivers()[0]["stream"])

    def receiver_records_since(self, since: float) -> int:
        if not self.receivers():
            return 0
        stream = str(self.receiver_stream())
        return sum(b["records"].get(stream, 0) for b in self.batches(since))

    def totals(self) -> dict[str, int]:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads((self.out / "totals.json").read_text()))
        return {}

    def wait_relaunched(self, host: str, since: float) -> tuple[float, float]:
        """Wait for the receiver to register on ``host`` after ``since``, then for a
        batch with its records; their wall times."""
        wait_until(lambda: any(self.host_of(r) == host for r in self.receivers(since)),
                   WAIT_S, f"the receiver to be relaunched on {host}",
                   poll_s=0.5, abort=self.app_exited, details=self.details)
        relaunched = next(r for r in self.receivers(since) if self.host_of(r) == host)
        wait_until(lambda: self.receiver_records_since(relaunched["wall"]) > 0,
                   WAIT_S, "a batch with records of the relaunched receiver",
                   poll_s=0.5, abort=self.app_exited, details=self.details)
        stream = str(self.receiver_stream())
        first = next(b["wall"] for b in self.batches(relaunched["wall"])
                     if b["records"].get(stream, 0))
        return float(relaunched["wall"]), float(first)

    def wait_totals_exact(self, expected: dict[str, int]) -> None:
        """Wait until the running totals equal ``expected``: failing at once on a count
        above it or on the app's exit, and after a minute without a completed batch."""
        def over_or_exited() -> str | None:
            over = {w: n for w, n in self.totals().items() if n > expected.get(w, 0)}
            return f"totals over the input: {over}" if over else self.app_exited()

        wait_until(lambda: self.totals() == expected, WAIT_S,
                   "the running totals to equal the input", poll_s=1.0,
                   progress=lambda: len(self.batches()), stall_s=60, abort=over_or_exited,
                   details=lambda: f"{sum(self.totals().values())} of "
                                   f"{sum(expected.values())} words\n{self.details()}")

    def forge(self) -> dict[str, Any]:
        return dict(self.tool("forge", "--address", self.endpoint,
                              "--stream", str(self.receiver_stream()),
                              "--source-topic", self.topics["receiver"]))

    def batches_run_twice(self) -> str:
        """Each batch both drivers completed, with the records per stream each ran it
        with: a batch re-run with other input than its first run shows here."""
        by_time: dict[int, list[dict[str, Any]]] = {}
        for b in self.batches():
            by_time.setdefault(b["batch"], []).append(b)
        rows = [f"  batch {t}: " + "; ".join(f"pid {b['pid']}: {b['records']}" for b in runs)
                for t, runs in sorted(by_time.items()) if len({b["pid"] for b in runs}) > 1]
        return "batches completed by both drivers:\n" + ("\n".join(rows) or "  none")


class QueryRun(ClusterRun):
    """multihost_app's Structured Streaming query over ``format("walstream")``."""

    def __init__(self, cluster: MultiHostCluster, env_archive: Path) -> None:
        super().__init__(cluster, env_archive, "query", {"structured": "in-structured"},
                         "out-structured")

    def submit(self, link_environment: bool = True) -> subprocess.Popen[bytes]:
        """Submit the query. Spark plans a Python data source's micro-batches in a
        Python worker the driver starts with ``./environment/bin/python`` too, so in
        client mode the submit directory holds ``environment``, a link to the driver's
        own virtualenv (which sees the project), unless ``link_environment`` is false."""
        cwd = self.work / "submit"
        cwd.mkdir(exist_ok=True)
        if link_environment and not (cwd / "environment").exists():
            (cwd / "environment").symlink_to(sys.prefix)
        return self.spark_submit("query", "--name", "mh-query",
                                 "--topic", self.topics["structured"], "--sink", self.sink,
                                 "--batch", str(BATCH_S), cwd=cwd)

    def receiver_starts(self) -> list[dict[str, Any]]:
        """Each registration the driver accepted, in order: stream, host, executor and
        the worker host running it (None once that host is gone)."""
        starts = []
        for m in _RECEIVER_STARTED.finditer(self.driver_log()):
            stream, host, executor = int(m[1]), m[2], m[3]
            starts.append({"stream": stream, "host": host, "executor": executor,
                           "worker": self.worker_of(int(executor.rsplit(":", 1)[1]))})
        return starts

    def records_since(self, since: float) -> int:
        return sum(int(b["records"]) for b in self.batches(since))

    def details(self) -> str:
        return (f"receiver starts: {self.receiver_starts()}\n"
                f"micro-batches completed: {len(self.batches())}\n" + self.errors())
