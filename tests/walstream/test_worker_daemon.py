"""The worker daemon's preloading: every module it names imports, and none starts a
thread (a process must not fork while other threads run). Its workers: one whose
socket the JVM already closed ends quietly with a non-zero code, where PySpark's
own daemon prints a traceback for it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from walstream import worker_daemon

_IMPORT_ALL = """
import importlib, os, sys
from walstream.worker_daemon import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)  # no suppression here: a typo or a broken module fails
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_the_preloaded_modules_import_without_starting_a_thread() -> None:
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL], check=True,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["1"], out.stderr  # the main thread only, native ones too


def test_it_preloads_what_a_batch_task_and_a_receiver_task_unpickle() -> None:
    for name in ("pyspark.worker", "walstream.driver.dstream.block_rdd", "walstream.receiver.task"):
        assert name in worker_daemon.PRELOAD


ROOT = Path(__file__).resolve().parents[2]

# One worker run on a socket whose other end (the JVM's) is closed, as after
# SparkContext.stop() closed an idle worker: PySpark's daemon.worker as it is
# ("stock") or wrapped ("quiet"); PySpark's worker reads an argument that
# starts with "pyspark" as a worker module's name, with the flush-failure setting Spark
# passes to its daemon by default.
_RUN = textwrap.dedent("""
    import os, socket, sys
    os.environ["PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"] = "true"
    from pyspark import daemon
    from walstream.worker_daemon import quiet_on_closed_socket
    worker = daemon.worker if sys.argv[1] == "stock" else quiet_on_closed_socket(daemon.worker)
    mine, jvm = socket.socketpair()
    jvm.close()
    try:
        print("CODE", worker(mine, True), flush=True)
    except BrokenPipeError:
        print("RAISED BrokenPipeError", flush=True)
""")


def _run(which: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"}
    done = subprocess.run([sys.executable, "-c", _RUN, which], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("CODE", "RAISED"))]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    return lines[0]


def test_pysparks_worker_raises_when_the_jvm_closed_its_socket() -> None:
    # The behaviour the wrapper exists for; if PySpark stops raising here, the
    # wrapper is a no-op and this test says so.
    assert _run("stock") == "RAISED BrokenPipeError"


def test_the_wrapped_worker_ends_with_a_non_zero_code_instead() -> None:
    assert _run("quiet") == "CODE 1"


def test_other_errors_and_codes_pass_through() -> None:
    def fails(sock: object, authenticated: bool) -> int:
        raise ValueError("not a closed socket")

    with pytest.raises(ValueError, match="not a closed socket"):
        worker_daemon.quiet_on_closed_socket(fails)(None, True)
    assert worker_daemon.quiet_on_closed_socket(lambda s, a: 0)(None, True) == 0
    assert worker_daemon.quiet_on_closed_socket(lambda s, a: -1)(None, True) == -1
