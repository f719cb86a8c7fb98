"""The chaos harness's application process group and what it can read of it.

The application (:mod:`walstream.testing.chaos_app`) runs as its own process group,
tied to the harness with ``die_with_parent``; it reports its batches and its
receivers' workers in files under its work directory, which the harness reads here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from walstream import killpoints, procs
from walstream.testing.chaos_config import ROOT, ChaosConfig


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
