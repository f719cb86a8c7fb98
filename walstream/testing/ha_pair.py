"""Several processes of :mod:`walstream.testing.ha_app` sharing one checkpoint
directory, hence one lease: launched, killed, paused and read back by the high
availability tests. Every process runs in its own session; :meth:`Pair.close` kills
what is left of each (resuming a paused one first)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from driver.kafka_sink import read_exactly_once
from walstream import procs

ROOT = Path(__file__).resolve().parents[2]
TOTAL, RATE, SEED = 24000, 400, 5


def jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


class Pair:
    """The app's processes, their logs and what they recorded. ``env`` is added to
    every process's environment (e.g. ``WALSTREAM_KILL_POINT_FILE``)."""

    def __init__(self, tmp: Path, bootstrap: str, sink: str, direct: str,
                 total: int = TOTAL, env: dict[str, str] | None = None) -> None:
        self.total = total
        self.env = dict(env or {})
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
        env.update(self.env)
        n = len(self.procs)
        log = open(self.logs / f"app-{n}.log", "ab")  # noqa: SIM115 - closed by close()
        self._files.append(log)
        p = subprocess.Popen(
            [sys.executable, "-m", "walstream.testing.ha_app", str(self.ckpt), str(self.out),
             "--sink", self.sink, "--bootstrap", self.bootstrap, "--total", str(self.total),
             "--rate", str(RATE), "--seed", str(SEED), "--direct-topic", self.direct],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        self.procs[p.pid] = p
        return p

    def log_of(self, p: subprocess.Popen[bytes]) -> str:
        n = list(self.procs).index(p.pid)
        return (self.logs / f"app-{n}.log").read_text(errors="replace")

    def role(self, p: subprocess.Popen[bytes]) -> str | None:
        roles = [r["role"] for r in jsonl(self.out / "roles.jsonl") if r["pid"] == p.pid]
        return roles[-1] if roles else None

    def batches(self, p: subprocess.Popen[bytes] | None = None,
                since: float = 0.0) -> list[dict[str, Any]]:
        return [b for b in jsonl(self.out / "progress.jsonl")
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


def sink_counts(bootstrap: str, sink: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _, _, value in read_exactly_once(bootstrap, sink, kafka_conf={}):
        word, _, n = (value or b"").decode().rpartition("\t")
        counts[word] += int(n)
    return counts
