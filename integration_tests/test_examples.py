"""Spark's example apps, with only their imports changed, print correct counts.

Each runs as its own process (``python examples/X.py ...`` with the master from
PYSPARK_SUBMIT_ARGS, as spark-submit would set it), fed by a local TCP server or
a Kafka topic with a known set of lines; its printed counts must add up exactly.
The whole process group is killed at the end: nothing is left behind.

The wheel: built from this checkout and installed into a fresh virtualenv outside
the repository, it adds one import name (``walstream``) and the ``walstream``
command, and Spark's receiver-based Kafka word count runs from it.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
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


def _env(bootstrap: str, tmp_path: Path, python: str = sys.executable) -> dict[str, str]:
    """An example's environment; ``python`` other than this one runs it without the
    checkout on its path (an installed walstream)."""
    env = dict(os.environ)
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
               PYSPARK_SUBMIT_ARGS="--master local[3] pyspark-shell",
               PYTHONPATH=str(ROOT))
    if python != sys.executable:
        env.pop("PYTHONPATH")
        env.pop("VIRTUAL_ENV", None)
    return env


class App:
    """An example running in its own session; stdout collected line by line."""

    def __init__(self, script: str | Path, args: list[str], env: dict[str, str], cwd: Path,
                 python: str = sys.executable) -> None:
        self.proc = subprocess.Popen(
            [python, str(ROOT / "examples" / script), *args], cwd=cwd, env=env,
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
    _counts_exactly(app, bootstrap, topic)


def _counts_exactly(app: App, bootstrap: str, topic: str) -> None:
    """Once ``app`` printed its first batch, feed ``LINES`` to ``topic``; its printed
    counts must add up to exactly theirs. The app is killed at the end."""
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


def _wheel_venv(tmp_path: Path) -> Path:
    """A fresh virtualenv outside the repository with walstream's wheel installed;
    returns its python. Asserts what the wheel and the install add: one import name.

    The wheel installs without its dependencies, which the virtualenv reads from this
    one's site-packages (a path file after its own, so the wheel's walstream comes
    first; the path files in that directory, the editable install's among them, are
    not read): it tests what the wheel adds, without a second gigabyte of PySpark."""
    # Built from a copy: a build in the checkout leaves build/ and egg-info behind.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache"))
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(dist), str(source)], capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("walstream-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        tops = {n.split("/")[0] for n in whl.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"walstream"}, sorted(tops)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (site,) = venv.glob("lib/python*/site-packages")
    before = set(os.listdir(site))
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True,
                               timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    added = {n for n in set(os.listdir(site)) - before if not n.endswith(".dist-info")}
    assert added == {"walstream"}, sorted(added)
    assert (venv / "bin" / "walstream").is_file()
    import pyspark

    (site / "zz-dependencies.pth").write_text(f"{Path(pyspark.__file__).parents[1]}\n")
    return python


def test_the_wheel_adds_one_import_name_and_runs_the_kafka_word_count(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    python = str(_wheel_venv(tmp_path))
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    env = _env(bootstrap, tmp_path, python)
    where = subprocess.run(
        [python, "-c", "import importlib.util, walstream\n"
         "print(walstream.__file__)\n"
         "print([n for n in ('driver', 'receiver', 'wal', 'checkpoint', 'structured')\n"
         "       if importlib.util.find_spec(n) is not None])"],
        cwd=app_dir, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    module, bare = where.stdout.splitlines()
    assert module.startswith(str(tmp_path / "venv")) and bare == "[]", where.stdout
    script = app_dir / "kafka_wordcount.py"
    script.write_text((ROOT / "examples" / "kafka_wordcount.py").read_text())
    topic = topic_factory("words")
    _counts_exactly(App(script, [bootstrap, topic], env, app_dir, python), bootstrap, topic)
