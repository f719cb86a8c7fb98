"""Unix domain sockets to the Python workers: a default that never overrides the app,
and, on a SparkContext the app built itself, in effect for the first Python task
after a StreamingContext was made on it; with them, walstream's quiet daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from walstream.driver.dstream.recovery import recovered_conf
from walstream.driver.python_sockets import DAEMON_KEY, UDS_ENV, UDS_KEY, unix_sockets_default
from walstream.driver.spark import spark_settings
from walstream.worker_daemon import MODULE as DAEMON_MODULE

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_is_unix_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UDS_ENV, raising=False)
    conf: dict[str, str] = {}
    unix_sockets_default(conf)
    assert conf == {UDS_KEY: "true", DAEMON_KEY: DAEMON_MODULE}
    assert spark_settings("app", "local[2]")[UDS_KEY] == "true"
    assert spark_settings("app", "local[2]")[DAEMON_KEY] == DAEMON_MODULE
    assert recovered_conf({"spark.app.name": "a"}, {})[UDS_KEY] == "true"
    assert recovered_conf({"spark.app.name": "a"}, {})[DAEMON_KEY] == DAEMON_MODULE


def test_the_apps_choice_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UDS_ENV, raising=False)
    conf = {UDS_KEY: "false"}
    unix_sockets_default(conf)
    assert conf == {UDS_KEY: "false"}  # TCP: PySpark's own daemon
    assert spark_settings("app", "local[2]", {UDS_KEY: "false"})[UDS_KEY] == "false"
    assert recovered_conf({UDS_KEY: "false"}, {})[UDS_KEY] == "false"
    own = {DAEMON_KEY: "my.daemon"}
    unix_sockets_default(own)
    assert own == {UDS_KEY: "true", DAEMON_KEY: "my.daemon"}


def test_sparks_environment_default_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UDS_ENV, "false")
    conf: dict[str, str] = {}
    unix_sockets_default(conf)
    assert conf == {}
    monkeypatch.setenv(UDS_ENV, "true")
    unix_sockets_default(conf)
    assert conf == {DAEMON_KEY: DAEMON_MODULE}


# A fresh PySpark app: its own SparkContext, a walstream StreamingContext on it, then
# one Python task that reports the sockets its worker holds with a peer.
_APP = textwrap.dedent("""
    import json, os, socket, sys
    from pyspark import SparkConf, SparkContext
    from walstream.driver import StreamingContext

    def sockets(_):
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                s = socket.socket(fileno=os.dup(int(fd)))
            except OSError:
                continue
            try:
                s.getpeername()
                found.append(s.family.name)
            except OSError:
                pass
            finally:
                s.close()
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            daemon = f.read().decode().split("\\0")
        yield {"families": found, "daemon": daemon}

    conf = (SparkConf().setMaster("local[1]").setAppName("uds")
            .set("spark.ui.enabled", "false"))
    for kv in sys.argv[1:]:
        conf.set(*kv.split("=", 1))
    sc = SparkContext(conf=conf)
    try:
        StreamingContext(sc, 1)
        print("WORKER " + json.dumps(sc.parallelize([0], 1).mapPartitions(sockets).collect()[0]))
    finally:
        sc.stop()
    sys.stdout.flush()
    os._exit(0)
""")


def _worker(*conf: str) -> dict[str, list[str]]:
    """What the first Python worker of a fresh app saw: its sockets' families, and
    the command line of the daemon that forked it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", UDS_ENV)}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-c", _APP, *conf], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("WORKER ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    seen: dict[str, list[str]] = json.loads(lines[0].split(" ", 1)[1])
    return seen


def test_a_streaming_context_gives_an_app_built_context_unix_sockets() -> None:
    seen = _worker()
    assert "AF_UNIX" in seen["families"]
    assert "AF_INET" not in seen["families"] and "AF_INET6" not in seen["families"]
    assert DAEMON_MODULE in seen["daemon"]


def test_an_app_that_said_false_keeps_tcp() -> None:
    seen = _worker(f"{UDS_KEY}=false")
    assert "AF_UNIX" not in seen["families"]
    assert "AF_INET" in seen["families"] or "AF_INET6" in seen["families"]
    assert "pyspark.daemon" in seen["daemon"]


def test_a_context_with_no_jvm_is_left_alone() -> None:
    from walstream.driver.python_sockets import prefer_unix_sockets

    class NoJvm:  # what test doubles of a SparkContext look like
        _jsc = None

    assert prefer_unix_sockets(NoJvm()) is False
    assert prefer_unix_sockets(object()) is False
