"""A Spark standalone cluster on loopback (a master and 1-core workers), for tests and benchmarks.

Started with pyspark's own ``spark-class`` (no separate Spark install), each
process in its own process group, every one of them (executors included)
killed when the context exits, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from walstream.testing.waiting import wait_until


def log(msg: str) -> None:
    print(f"[standalone {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def _exited(proc: subprocess.Popen[bytes]) -> Callable[[], str | None]:
    """An ``abort`` for :func:`wait_until`: the reason once ``proc`` has exited."""
    def reason() -> str | None:
        if proc.poll() is None:
            return None
        return f"process {proc.args!r} exited with {proc.returncode}"
    return reason


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes], logs: Path) -> None:
    """Wait until ``port`` accepts connections; fail at once if ``proc`` exits."""
    wait_until(partial(_port_open, port), timeout_s, f"port {port} to open", poll_s=0.2,
               abort=_exited(proc), details=lambda: f"logs in {logs}")


def _alive_workers(ui_port: int) -> int:
    """The master's count of alive workers, read from its web UI (0 while it does not answer)."""
    with contextlib.suppress(OSError, ValueError):
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            state = json.load(r)
        return int(state.get("aliveworkers", 0))
    return 0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            # The group may outlive its leader (an executor JVM, a Python daemon).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, 0)
                continue  # still members: escalate
            return
        except subprocess.TimeoutExpired:
            continue


def _pids_in_groups(groups: set[int]) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z" and int(fields[2]) in groups:  # zombies are gone already
                    out.append(int(d.name))
    return out


@contextlib.contextmanager
def standalone_cluster(workers: int = 2) -> Iterator[str]:
    """A Spark master and ``workers`` 1-core workers on 127.0.0.1; all killed on exit."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    spark_class = spark_home / "bin" / "spark-class"
    tmp = Path(tempfile.mkdtemp(prefix="walstream-spark-"))
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp / "work"), "SPARK_LOG_DIR": str(tmp / "logs"),
           "PYSPARK_PYTHON": sys.executable}
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        logf = (tmp / f"{name}.log").open("wb")
        p = subprocess.Popen([str(spark_class), *args], env=env, stdout=logf,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        logf.close()
        procs.append(p)
        return p

    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    try:
        master = launch("master", ["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", str(port), "--webui-port", str(ui)])
        _wait_port(port, 90, master, tmp)
        for i in range(workers):
            launch(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host",
                                   "127.0.0.1", "--cores", "1", "--memory", "1g",
                                   "--work-dir", str(tmp / "work" / str(i)),
                                   "--webui-port", str(_free_port()), url])
        _wait_port(ui, 60, master, tmp)
        wait_until(lambda: _alive_workers(ui) >= workers, 90, f"{workers} workers to register",
                   poll_s=0.5, abort=_exited(master), details=lambda: f"logs in {tmp}")
        log(f"standalone cluster up at {url} with {workers} workers")
        yield url
    finally:
        groups = {p.pid for p in procs}
        for p in reversed(procs):
            _kill_group(p)
        deadline = time.monotonic() + 10
        while _pids_in_groups(groups) and time.monotonic() < deadline:
            time.sleep(0.2)  # members of a killed group that are still exiting
        left = _pids_in_groups(groups)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if left:
            log(f"killed {len(left)} leftover cluster processes: {left}")
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


