"""High availability: the same app (a receiver stream and a direct Kafka stream)
started twice leads once and stands by once; the leader SIGKILLed (its whole process
group, JVM included) three times, each time restarted as the next standby, and once
paused with SIGSTOP until the standby took over, after which it wakes fenced and
exits. The running totals and the KafkaSink output are exact: nothing lost, nothing
doubled."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from driver.kafka_sink import read_exactly_once
from walstream import procs
from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.recovery_app import expected_counts

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[1]
TOTAL, RATE, SEED = 24000, 400, 5
DIRECT_RECORDS, DIRECT_RATE = 12000, 150.0
WAIT_S = 240  # bound on each wait, on a loaded 2-core machine


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


class Pair:
    """The app's processes, their logs and what they recorded."""

    def __init__(self, tmp: Path, bootstrap: str, sink: str, direct: str) -> None:
        self.ckpt, self.out, self.bootstrap, self.sink = tmp / "ckpt", tmp / "out", bootstrap, sink
        self.direct = direct
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._files: list[Any] = []

    def launch(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(ROOT))
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        env.pop("WALSTREAM_KILL_POINT", None)
        n = len(self.procs)
        log = open(self.logs / f"app-{n}.log", "ab")  # noqa: SIM115 - closed by close()
        self._files.append(log)
        p = subprocess.Popen(
            [sys.executable, "-m", "walstream.testing.ha_app", str(self.ckpt), str(self.out),
             "--sink", self.sink, "--bootstrap", self.bootstrap, "--total", str(TOTAL),
             "--rate", str(RATE), "--seed", str(SEED), "--direct-topic", self.direct],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        self.procs[p.pid] = p
        return p

    def log_of(self, p: subprocess.Popen[bytes]) -> str:
        n = list(self.procs).index(p.pid)
        return (self.logs / f"app-{n}.log").read_text(errors="replace")

    def role(self, p: subprocess.Popen[bytes]) -> str | None:
        roles = [r["role"] for r in _jsonl(self.out / "roles.jsonl") if r["pid"] == p.pid]
        return roles[-1] if roles else None

    def batches(self, p: subprocess.Popen[bytes] | None = None,
                since: float = 0.0) -> list[dict[str, Any]]:
        return [b for b in _jsonl(self.out / "progress.jsonl")
                if (p is None or b["pid"] == p.pid) and b["wall"] >= since]

    def ran(self, p: subprocess.Popen[bytes], since: float, n: int) -> bool:
        return len(self.batches(p, since)) >= n

    def has_role(self, p: subprocess.Popen[bytes], role: str) -> bool:
        return self.role(p) == role

    def totals(self) -> dict[str, int]:
        try:
            return dict(json.loads((self.out / "totals.json").read_text()))
        except (OSError, ValueError):
            return {}

    def details(self) -> str:
        return "\n".join(f"--- app {i} (pid {pid}, exit {p.poll()}) ---\n"
                         + "\n".join(self.log_of(p).splitlines()[-40:])
                         for i, (pid, p) in enumerate(self.procs.items()))

    def kill(self, p: subprocess.Popen[bytes]) -> None:
        assert procs.kill_group(p.pid), "the app's processes survived SIGKILL"
        p.poll()

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGCONT)
                procs.kill_group(p.pid)
            p.wait(timeout=30)
        for f in self._files:
            f.close()


def _sink_counts(bootstrap: str, sink: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _, _, value in read_exactly_once(bootstrap, sink, kafka_conf={}):
        word, _, n = (value or b"").decode().rpartition("\t")
        counts[word] += int(n)
    return counts


def test_leader_killed_three_times_and_paused_once_counts_exactly(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    pair = Pair(tmp_path, bootstrap, topic_factory("ha-sink"), topic_factory("ha-direct"))
    # The direct stream's input, fed while the takeovers happen (bad records among it).
    feeder = Feeder(bootstrap, pair.direct, ChaosConfig(records=DIRECT_RECORDS,
                                                        rate=DIRECT_RATE, seed=SEED))
    figures: dict[str, Any] = {}
    try:
        feeder.start()
        leader = pair.launch()
        wait_until(lambda: pair.role(leader) == "leader" and bool(pair.batches(leader)),
                   WAIT_S, "the first process to lead and complete a batch",
                   details=pair.details)
        standby = pair.launch()
        wait_until(lambda: pair.role(standby) == "standby", WAIT_S,
                   "the second process to stand by", details=pair.details)

        failovers = []
        for round_ in range(3):
            # Let the leader run a few batches of its own first.
            started = time.time()
            wait_until(functools.partial(pair.ran, leader, started, 3), WAIT_S,
                       f"round {round_}: the leader to run batches", details=pair.details)
            killed_at = time.time()
            pair.kill(leader)
            wait_until(functools.partial(pair.ran, standby, killed_at, 1), WAIT_S,
                       f"round {round_}: the standby's first batch after the kill",
                       details=pair.details)
            failovers.append(pair.batches(standby, killed_at)[0]["wall"] - killed_at)
            leader, standby = standby, pair.launch()  # the killed one comes back
            wait_until(functools.partial(pair.has_role, standby, "standby"), WAIT_S,
                       f"round {round_}: the restarted process to stand by",
                       details=pair.details)
        figures["SIGKILL -> the standby's first batch (s)"] = [round(f, 2) for f in failovers]

        # A leader paused past its lease wakes fenced and exits; the standby leads.
        paused_at = time.time()
        os.killpg(leader.pid, signal.SIGSTOP)
        wait_until(lambda: bool(pair.batches(standby, paused_at)), WAIT_S,
                   "the standby's first batch while the leader is paused",
                   details=pair.details)
        time.sleep(max(0.0, 5.0 - (time.time() - paused_at)))
        os.killpg(leader.pid, signal.SIGCONT)
        wait_until(lambda: leader.poll() is not None, WAIT_S,
                   "the paused leader to exit once woken", details=pair.details)
        assert "fenced" in pair.log_of(leader).lower(), pair.log_of(leader)[-3000:]
        figures["SIGSTOP -> the standby's first batch (s)"] = round(
            pair.batches(standby, paused_at)[0]["wall"] - paused_at, 2)

        feeder.join(WAIT_S)
        assert feeder.done.is_set() and not feeder.failed, feeder.failed
        expected = expected_counts(SEED, TOTAL)
        expected.update({f"d {w}": n for w, n in feeder.expected.items()})
        wait_until(lambda: pair.totals() == expected, WAIT_S,
                   "the running totals to equal the input",
                   abort=lambda: ("totals over the input" if any(
                       n > expected.get(w, 0) for w, n in pair.totals().items()) else None),
                   details=lambda: f"{sum(pair.totals().values())} of "
                                   f"{sum(expected.values())} words\n{pair.details()}")
        got = _sink_counts(bootstrap, pair.sink)
        want = Counter(expected)
        lost, doubled = sum((want - got).values()), sum((got - want).values())
        figures["sink words lost / doubled"] = f"{lost} / {doubled}"
        assert got == want, f"sink: {lost} words lost, {doubled} doubled\n{pair.details()}"
    finally:
        print("\nhigh availability:")
        for k, v in figures.items():
            print(f"  {k}: {v}")
        pair.close()
