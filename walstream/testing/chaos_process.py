"""The chaos harness's application process groups and what it can read of them.

The application (:mod:`walstream.testing.chaos_app`) runs as its own process group,
tied to the harness with ``die_with_parent``; it reports its batches and its
receivers' workers in files under its work directory, which the harness reads here.
:class:`HAPair` does the same for the high-availability app
(:mod:`walstream.testing.ha_app`) started more than once on one checkpoint
directory: a leader and a hot standby (the chaos harness's ``--mode ha`` and
``examples/demo_failover.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walstream import killpoints, procs
from walstream.testing.chaos_config import ROOT, ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.waiting import wait_until


class App:
    def __init__(self, work: Path, bootstrap: str, source: str, sink: str, cfg: ChaosConfig,
                 expected_words: int, master: str = "") -> None:
        self.master = master
        self.work, self.bootstrap, self.cfg = work, bootstrap, cfg
        self.ckpt, self.out = work / "ckpt", work / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.source, self.sink = source, sink
        self.expected_words = expected_words
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.restarts = 0

    @property
    def kill_point_file(self) -> Path:
        return self.work / "kill-point"

    def start(self) -> None:
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.bootstrap,
                   SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(ROOT))
        env.pop(killpoints.ENV, None)
        env[killpoints.FILE_ENV] = str(self.kill_point_file)
        if self.master:
            env["WALSTREAM_SPARK_MASTER"] = self.master
        env["WALSTREAM_RECOVERED_STATE_FILE"] = str(self.work / f"recovered-{self.restarts}.json")
        with open(self.work / "app.log", "ab") as err:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "walstream.testing.chaos_app", str(self.ckpt),
                 str(self.out), "--source", self.source, "--sink", self.sink,
                 "--mode", self.cfg.mode, "--expected", str(self.expected_words)],
                env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True,
                # A test runner killed from outside (a CI timeout) leaves no driver
                # behind; its JVM and workers follow the driver.
                preexec_fn=procs.die_with_parent)
        self.started_at = time.time()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            procs.kill_group(self.proc.pid)
            self.proc.poll()

    def batches_since(self, wall: float) -> list[dict[str, Any]]:
        path = self.out / "progress.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec["wall"] >= wall:
                    out.append(rec)
        return out

    def rss_mib(self) -> float:
        if self.proc is None:
            return 0.0
        total = 0
        for pid in group_pids(self.proc.pid):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        return total * os.sysconf("SC_PAGE_SIZE") / 2**20

    def receiver_worker_pid(self, field_no: int = 2) -> int:
        """The live process of the newest receiver start: its Python worker
        (``field_no=2``) or its executor's Python daemon (1); -1 if none."""
        path = self.out / "receivers.jsonl"
        if not path.exists():
            return -1
        lines = path.read_text().splitlines()
        for line in reversed(lines):
            with contextlib.suppress(ValueError, IndexError):
                pid = int(json.loads(line)["executor"].split(":")[field_no])
                if procs.pid_alive(pid):
                    return pid
        return -1

    def receiver_starts(self) -> int:
        path = self.out / "receivers.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0


def parent_pid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def is_executor(pid: int) -> bool:
    try:
        return b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def group_pids(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if os.getpgid(int(entry.name)) == pgid:
                    out.append(int(entry.name))
    return out


TOOK_OVER = re.compile(r"high availability: took over epoch (\d+) in ([0-9.]+) s")
#: What a woken leader logs once it finds itself fenced (a takeover's own step line
#: says "sinks fenced", which this does not match).
FENCED = re.compile(r"\bis fenced\b|\bfenced by epoch\b|LeaseFencedError")
#: How long a woken, fenced leader may take to exit.
FENCED_EXIT_S = 60.0
#: Bound on each wait for the HA app (a SparkContext start on a loaded 2-core machine).
HA_WAIT_S = 240.0


def takeovers(log_text: str) -> list[tuple[int, float]]:
    """(epoch, seconds) of each ``took over epoch N in X s`` line of an HA app's log:
    from the moment its standby saw the lease expired to leading."""
    return [(int(m.group(1)), float(m.group(2))) for m in TOOK_OVER.finditer(log_text)]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (none if it is missing; a line being written is skipped)."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


class HAPair:
    """The HA app started on one checkpoint directory as often as :meth:`launch` is
    called: each process a group of its own with a log of its own, tied to this one
    with ``die_with_parent``; roles, batches and totals read from its output files."""

    def __init__(self, work: Path, bootstrap: str, sink: str, *, total: int, rate: float,
                 seed: int, direct: str = "", lease_timeout: str = "1s",
                 batch_s: float = 1.0, env: dict[str, str] | None = None,
                 kafka_receiver: bool = False, app_args: tuple[str, ...] = ()) -> None:
        """``app_args`` are added to each process's command line (ha_app's options).
        ``env`` is added to each process's environment (after the kill-point
        variables are removed: a test may arm one, e.g. ``WALSTREAM_KILL_POINT_FILE``).
        ``kafka_receiver``: the direct topic is also read by the receiver-based Kafka
        stream (words tagged ``k``) and by a reliable custom receiver (``r``)."""
        self.ckpt, self.out, self.logs = work / "ckpt", work / "out", work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.bootstrap, self.sink, self.direct = bootstrap, sink, direct
        self.total, self.rate, self.seed, self.lease_timeout = total, rate, seed, lease_timeout
        self.batch_s = batch_s
        self.kafka_receiver = kafka_receiver
        self.app_args = tuple(app_args)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = dict(env or {})

    def launch(self, wrap: Callable[[list[str]], list[str]] | None = None
               ) -> subprocess.Popen[bytes]:
        """Start one more process of the app; ``wrap`` turns its command line into the
        one to run (a host of a network lab: ``lambda argv: lab.command(host, argv)``)."""
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(ROOT))
        for name in ("PYSPARK_SUBMIT_ARGS", killpoints.ENV, killpoints.FILE_ENV):
            env.pop(name, None)
        env.update(self.env)
        cmd = [sys.executable, "-m", "walstream.testing.ha_app", str(self.ckpt), str(self.out),
               "--sink", self.sink, "--bootstrap", self.bootstrap, "--total", str(self.total),
               "--rate", str(self.rate), "--seed", str(self.seed),
               "--lease-timeout", self.lease_timeout, "--batch", str(self.batch_s)]
        if self.direct:
            cmd += ["--direct-topic", self.direct]
        if self.kafka_receiver:
            cmd += ["--kafka-receiver"]
        cmd += self.app_args
        if wrap is not None:
            cmd = wrap(cmd)
        with open(self.logs / f"app-{len(self.procs)}.log", "ab") as err:
            p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True, preexec_fn=procs.die_with_parent)
        self.procs.append(p)
        return p

    def log_path(self, p: subprocess.Popen[bytes]) -> Path:
        return self.logs / f"app-{self.procs.index(p)}.log"

    def log_of(self, p: subprocess.Popen[bytes]) -> str:
        path = self.log_path(p)
        return path.read_text(errors="replace") if path.exists() else ""

    def role(self, p: subprocess.Popen[bytes]) -> str | None:
        """The role ``p`` wrote when its start returned (None: not yet)."""
        roles = [r.get("role") for r in read_jsonl(self.out / "roles.jsonl")
                 if r.get("pid") == p.pid]
        return str(roles[-1]) if roles else None

    def batches(self, p: subprocess.Popen[bytes] | None = None,
                since: float = 0.0) -> list[dict[str, Any]]:
        """Completed batches (of ``p`` only, if given) since the wall time ``since``."""
        return [b for b in read_jsonl(self.out / "progress.jsonl")
                if (p is None or b.get("pid") == p.pid) and b.get("wall", 0.0) >= since]

    def ran(self, p: subprocess.Popen[bytes], since: float, n: int) -> bool:
        """Whether ``p`` completed ``n`` batches since the wall time ``since``."""
        return len(self.batches(p, since)) >= n

    def totals(self) -> dict[str, int]:
        try:
            return dict(json.loads((self.out / "totals.json").read_text()))
        except (OSError, ValueError):
            return {}

    def details(self) -> str:
        """Each process's exit status and last log lines (``details=`` of a wait)."""
        return "\n".join(f"--- {self.log_path(p)} (pid {p.pid}, exit {p.poll()}) ---\n"
                         + "\n".join(self.log_of(p).splitlines()[-30:]) for p in self.procs)

    def wait_role(self, p: subprocess.Popen[bytes], role: str, what: str) -> None:
        """Wait until ``p`` is in ``role`` and, for a leader, completed a batch; fail
        early when it took another role or exited."""
        def other() -> str | None:
            got = self.role(p)
            if got is not None and got != role:
                return f"process {p.pid} is the {got}"
            return f"process {p.pid} exited ({p.poll()})" if p.poll() is not None else None

        wait_until(lambda: self.role(p) == role and (role != "leader" or bool(self.batches(p))),
                   HA_WAIT_S, what, poll_s=0.2, abort=other, details=self.details)

    def leader_and_standby(self) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
        """Two processes launched in turn: the first leads (and completed a batch),
        then the second stands by."""
        leader = self.launch()
        self.wait_role(leader, "leader", "the first process to lead")
        standby = self.launch()
        self.wait_role(standby, "standby", "the second process to stand by")
        return leader, standby

    def first_batch_after(self, p: subprocess.Popen[bytes], wall: float, what: str) -> float:
        """Seconds from ``wall`` to the first batch ``p`` completed after it (waited for)."""
        wait_until(lambda: bool(self.batches(p, wall)), HA_WAIT_S, what, poll_s=0.1,
                   abort=lambda: f"process {p.pid} exited" if p.poll() is not None else None,
                   details=self.details)
        return float(self.batches(p, wall)[0]["wall"]) - wall

    def took_over_s(self, p: subprocess.Popen[bytes], wait_s: float = 10.0) -> float | None:
        """The seconds of ``p``'s ``took over`` log line, waited for up to ``wait_s``
        (None: it did not log one)."""
        deadline = time.monotonic() + wait_s
        while True:
            found = takeovers(self.log_of(p))
            if found or time.monotonic() > deadline:
                return found[-1][1] if found else None
            time.sleep(0.1)

    def fail_over(self, leader: subprocess.Popen[bytes], standby: subprocess.Popen[bytes],
                  pause_s: float = 0.0) -> tuple[float, float | None, str | None]:
        """SIGKILL ``leader``'s whole group (``pause_s`` 0) or SIGSTOP it for ``pause_s``
        then SIGCONT it; wait for ``standby`` to take over and, after a pause, for the
        woken leader to exit fenced. Returns the seconds from the signal to the first
        batch ``standby`` completed, its logged takeover seconds, and what went wrong
        with the woken leader (None: it said it was fenced and exited; else it is
        killed). Raises when the group survives a SIGKILL or nobody takes over."""
        signalled = time.time()
        if pause_s <= 0:
            if not self.kill(leader):
                raise RuntimeError(f"the leader's group {leader.pid} survived SIGKILL")
            first = self.first_batch_after(standby, signalled, "the standby's first batch "
                                           "after the leader's SIGKILL")
            return first, self.took_over_s(standby), None
        seen = len(self.log_of(leader))
        os.killpg(leader.pid, signal.SIGSTOP)
        first = self.first_batch_after(standby, signalled, "the standby's first batch "
                                       "while the leader is paused")
        time.sleep(max(0.0, pause_s - (time.time() - signalled)))
        os.killpg(leader.pid, signal.SIGCONT)
        woken = time.monotonic()
        while leader.poll() is None and time.monotonic() - woken < FENCED_EXIT_S:
            time.sleep(0.2)
        said = bool(FENCED.search(self.log_of(leader)[seen:]))
        problem = None
        if leader.poll() is None:
            problem = (f"the paused leader {leader.pid} "
                       f"{'said it was fenced but ' if said else ''}did not exit within "
                       f"{FENCED_EXIT_S:.0f} s of waking; see {self.log_path(leader)}")
        elif not said:
            problem = (f"the paused leader {leader.pid} exited ({leader.returncode}) "
                       f"without saying it was fenced; see {self.log_path(leader)}")
        self.kill(leader)  # what is left of its group
        return first, self.took_over_s(standby), problem

    def rss_mib(self) -> float:
        """Resident memory of the live processes' groups, in MiB."""
        pages = 0
        for p in self.procs:
            if p.poll() is None:
                for pid in group_pids(p.pid):
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def kill(self, p: subprocess.Popen[bytes]) -> bool:
        """SIGKILL ``p``'s whole group (woken first if paused); whether it is gone."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGCONT)
        gone = procs.kill_group(p.pid)
        p.poll()
        return gone

    def close(self) -> None:
        """Stop every process this pair started, whatever state it is in."""
        for p in self.procs:
            self.kill(p)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)


def sink_counts(bootstrap: str, sink: str) -> Counter[str]:
    """Words and counts of the ``word\tcount`` records in the KafkaSink topic ``sink``,
    each batch's attempt read exactly once (``read_exactly_once``)."""
    from walstream.driver.sink.kafka_sink import read_exactly_once

    counts: Counter[str] = Counter()
    for _, _, value in read_exactly_once(bootstrap, sink, kafka_conf={}):
        word, _, n = (value or b"").decode().rpartition("\t")
        counts[word] += int(n)
    return counts


def wait_for_exact(pair: HAPair, feeder: Feeder, seed: int, total: int,
                   wait_s: float) -> tuple[int, int]:
    """The end of an HA run: the direct stream's feeder done, the running totals equal
    to the input (the receiver's ``total`` seeded lines plus the feeder's words,
    tagged ``d``, and tagged ``k`` and ``r`` once more each when the Kafka receiver and
    the committing receiver read them too;
    waited for, failing early on a count above the input), and the KafkaSink output
    read exactly once. Returns the sink's (lost, doubled) words."""
    from walstream.testing.recovery_app import expected_counts

    feeder.join(wait_s)
    if not feeder.done.is_set() or feeder.failed:
        raise AssertionError(f"the direct stream's input was not all written: {feeder.failed}")
    expected = expected_counts(seed, total)
    expected.update({f"d {w}": n for w, n in feeder.expected.items()})
    if pair.kafka_receiver:
        expected.update({f"k {w}": n for w, n in feeder.expected.items()})
        expected.update({f"r {w}": n for w, n in feeder.expected.items()})
    wait_until(lambda: pair.totals() == expected, wait_s,
               "the running totals to equal the input",
               abort=lambda: ("totals over the input" if any(
                   n > expected.get(w, 0) for w, n in pair.totals().items()) else None),
               details=lambda: f"{sum(pair.totals().values())} of "
                               f"{sum(expected.values())} words\n{pair.details()}")
    got, want = sink_counts(pair.bootstrap, pair.sink), Counter(expected)
    return sum((want - got).values()), sum((got - want).values())
