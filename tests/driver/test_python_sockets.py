"""Unix domain sockets to the Python workers: a default that never overrides the app,
and, on a SparkContext the app built itself, in effect for the first Python task
after a StreamingContext was made on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from driver.python_sockets import UDS_ENV, UDS_KEY, unix_sockets_default
from driver.recovery import recovered_conf
from driver.spark import spark_settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_is_unix_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UDS_ENV, raising=False)
    conf: dict[str, str] = {}
    unix_sockets_default(conf)
    assert conf == {UDS_KEY: "true"}
    assert spark_settings("app", "local[2]")[UDS_KEY] == "true"
    assert recovered_conf({"spark.app.name": "a"}, {})[UDS_KEY] == "true"


def test_the_apps_choice_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UDS_ENV, raising=False)
    conf = {UDS_KEY: "false"}
    unix_sockets_default(conf)
    assert conf == {UDS_KEY: "false"}
    assert spark_settings("app", "local[2]", {UDS_KEY: "false"})[UDS_KEY] == "false"
    assert recovered_conf({UDS_KEY: "false"}, {})[UDS_KEY] == "false"


def test_sparks_environment_default_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UDS_ENV, "false")
    conf: dict[str, str] = {}
    unix_sockets_default(conf)
    assert conf == {}


# A fresh PySpark app: its own SparkContext, a walstream StreamingContext on it, then
# one Python task that reports the sockets its worker holds with a peer.
_APP = textwrap.dedent("""
    import json, os, socket, sys
    from pyspark import SparkConf, SparkContext
    from driver import StreamingContext

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
        yield found

    conf = (SparkConf().setMaster("local[1]").setAppName("uds")
            .set("spark.ui.enabled", "false"))
    for kv in sys.argv[1:]:
        conf.set(*kv.split("=", 1))
    sc = SparkContext(conf=conf)
    try:
        StreamingContext(sc, 1)
        print("FAMILIES " + json.dumps(sc.parallelize([0], 1).mapPartitions(sockets).collect()[0]))
    finally:
        sc.stop()
    sys.stdout.flush()
    os._exit(0)
""")


def _worker_socket_families(*conf: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", UDS_ENV)}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-c", _APP, *conf], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("FAMILIES ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    families: list[str] = json.loads(lines[0].split(" ", 1)[1])
    return families


def test_a_streaming_context_gives_an_app_built_context_unix_sockets() -> None:
    families = _worker_socket_families()
    assert "AF_UNIX" in families
    assert "AF_INET" not in families and "AF_INET6" not in families


def test_an_app_that_said_false_keeps_tcp() -> None:
    families = _worker_socket_families(f"{UDS_KEY}=false")
    assert "AF_UNIX" not in families
    assert "AF_INET" in families or "AF_INET6" in families


def test_a_context_with_no_jvm_is_left_alone() -> None:
    from driver.python_sockets import prefer_unix_sockets

    class NoJvm:  # what test doubles of a SparkContext look like
        _jsc = None

    assert prefer_unix_sockets(NoJvm()) is False
    assert prefer_unix_sockets(object()) is False
