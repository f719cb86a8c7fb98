"""Spark's example apps, with only their imports changed, print correct counts.

Each runs as its own process (``python examples/X.py ...`` with the master from
PYSPARK_SUBMIT_ARGS, as spark-submit would set it), fed by a local TCP server or
a Kafka topic with a known set of lines; its printed counts must add up exactly.
The whole process group is killed at the end: nothing is left behind.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from walstream.testing import wait_until

ROOT = Path(__file__).resolve().parents[1]
LINES = [f"{w1} {w2} {w3}" for w1, w2, w3 in
         zip(["spark", "kafka", "wal"] * 20, ["stream", "spark"] * 30, ["block"] * 60,
             strict=True)]
EXPECTED = Counter(w for line in LINES for w in line.split())
POLL_S = 0.2  # the pause between polls of an app's output

pytestmark = pytest.mark.spark


def _env(bootstrap: str, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYSPARK_SUBMIT_ARGS="--master local[3] pyspark-shell",
               PYTHONPATH=str(ROOT))
    return env


class App:
    """An example running in its own session; stdout collected line by line."""

    def __init__(self, script: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def exited(self) -> str | None:
        """Why a wait on this app cannot succeed any more: it exited (``abort=``)."""
        code = self.proc.poll()
        return None if code is None else f"the app exited ({code})"

    def tail(self) -> str:
        """The app's last 60 output lines (``details=`` of a wait)."""
        return "\n".join(self.lines[-60:])

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        self.proc.poll()  # reap our own child if it is done
        return True

    def kill(self) -> None:
        """SIGTERM the whole group (Python driver, JVM, workers); SIGKILL what stays."""
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        assert not self._group_alive(), "processes of the example survived"


def pair_counts(lines: list[str]) -> Counter[str]:
    """Sum the ('word', n) pairs pprint printed over all batches."""
    out: Counter[str] = Counter()
    for line in lines:
        if line.startswith("('"):
            word, n = ast.literal_eval(line)
            out[word] += n
    return out


@pytest.fixture
def line_server() -> Iterator[tuple[int, threading.Event]]:
    server = socket.create_server(("127.0.0.1", 0))
    go = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        go.wait(60)
        for line in LINES:
            conn.sendall(f"{line}\n".encode())
            time.sleep(0.01)
        done.set()
        time.sleep(3600)

    done = threading.Event()
    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], go
    server.close()


@pytest.mark.parametrize("script", ["network_wordcount.py", "stateful_network_wordcount.py",
                                    "sql_network_wordcount.py"])
def test_network_examples(script: str, line_server: tuple[int, threading.Event],
                          bootstrap: str, tmp_path: Path) -> None:
    port, go = line_server
    app = App(script, ["127.0.0.1", str(port)], _env(bootstrap, tmp_path), tmp_path)
    try:
        wait_until(lambda: any(line.startswith(("Time:", "=====")) for line in app.lines),
                   120, "the first batch", poll_s=POLL_S, abort=app.exited, details=app.tail)
        go.set()
        if script == "network_wordcount.py":
            wait_until(lambda: pair_counts(app.lines) == EXPECTED, 90, "exact counts",
                       poll_s=POLL_S, abort=app.exited, details=app.tail)
        elif script == "stateful_network_wordcount.py":
            final = EXPECTED + Counter({"hello": 1, "world": 1})

            def last_batch() -> Counter[str]:
                starts = [i for i, line in enumerate(app.lines) if line.startswith("Time:")]
                return pair_counts(app.lines[starts[-1]:]) if starts else Counter()

            wait_until(lambda: last_batch() == final, 90, "exact running totals",
                       poll_s=POLL_S, abort=app.exited, details=app.tail)
        else:
            def sql_counts() -> Counter[str]:
                out: Counter[str] = Counter()
                for line in app.lines:
                    m = re.match(r"^\|\s*(\w+)\|\s*(\d+)\|$", line)
                    if m and m.group(1) != "word":
                        out[m.group(1)] += int(m.group(2))
                return out

            wait_until(lambda: sql_counts() == EXPECTED, 120, "exact SQL counts",
                       poll_s=POLL_S, abort=app.exited, details=app.tail)
    finally:
        app.kill()


@pytest.mark.parametrize("script", ["kafka_wordcount.py", "direct_kafka_wordcount.py"])
def test_kafka_examples(script: str, bootstrap: str, topic_factory: Callable[..., str],
                        tmp_path: Path) -> None:
    topic = topic_factory("words")
    app = App(script, [bootstrap, topic], _env(bootstrap, tmp_path), tmp_path)
    try:
        wait_until(lambda: any(line.startswith("Time:") for line in app.lines), 120,
                   "the first batch", poll_s=POLL_S, abort=app.exited, details=app.tail)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for line in LINES:
            producer.produce(topic, line.encode(), partition=0)
        assert producer.flush(30) == 0
        wait_until(lambda: pair_counts(app.lines) == EXPECTED, 90, "exact counts",
                   poll_s=POLL_S, abort=app.exited, details=app.tail)
    finally:
        app.kill()


def test_structured_receiver_wordcount_is_exact(bootstrap: str, tmp_path: Path,
                                                unique_name: Callable[[str], str]) -> None:
    app = App("structured_receiver_wordcount.py",
              ["--total", "3000", "--rate", "3000", "--name", unique_name("wc"),
               "--checkpoint", str(tmp_path / "ckpt"), "--timeout", "240"],
              _env(bootstrap, tmp_path), tmp_path)
    try:
        wait_until(lambda: app.proc.poll() is not None, 300, "the example to finish",
                   poll_s=POLL_S, details=app.tail)
        assert app.proc.returncode == 0, app.tail()
        assert "exact: every word counted once" in app.lines, app.tail()
    finally:
        app.kill()
