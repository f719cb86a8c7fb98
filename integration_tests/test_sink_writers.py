"""Several writers into one KafkaSink topic: two independent applications copying
their own input topics into one shared topic at the same time, each in its own
process; the shared topic read exactly once holds every record of both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from driver.kafka_sink import read_exactly_once
from walstream import procs
from walstream.testing import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300.0


def _fill(bootstrap: str, topic: str, prefix: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"{prefix}-{i}".encode(), partition=0)
        if i % 1000 == 999:
            p.poll(0)
    assert p.flush(60) == 0


def _launch(tmp: Path, name: str, bootstrap: str, source: str, sink: str,
            records: int, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    log = open(tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "walstream.testing.copy_app", str(tmp / f"{name}-ckpt"),
             str(tmp / name), "--bootstrap", bootstrap, "--input", source, "--sink", sink,
             "--records", str(records), *extra],
            env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
    finally:
        log.close()


def _tail(tmp: Path, *names: str) -> Callable[[], str]:
    def show() -> str:
        return "\n".join(f"--- {n}:\n" + (tmp / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in names if (tmp / f"{n}.log").exists())
    return show


def test_two_apps_copying_into_one_topic_at_once_lose_nothing(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    in_a, in_b, out = (topic_factory("in-a"), topic_factory("in-b"),
                       topic_factory("shared-out"))
    _fill(bootstrap, in_a, "a", 3000)
    _fill(bootstrap, in_b, "b", 2000)
    apps = [_launch(tmp_path, "a", bootstrap, in_a, out, 3000),
            _launch(tmp_path, "b", bootstrap, in_b, out, 2000)]
    try:
        for app in apps:
            wait_until(lambda app=app: app.poll() is not None, WAIT_S,  # type: ignore[misc]
                       "both apps to copy their input and stop",
                       details=_tail(tmp_path, "a", "b"))
        assert [app.returncode for app in apps] == [0, 0], _tail(tmp_path, "a", "b")()
    finally:
        for app in apps:
            procs.kill_group(app.pid)
    got = Counter((v or b"").decode() for _, _, v in
                  read_exactly_once(bootstrap, out, kafka_conf={}))
    expected = Counter([f"a-{i}" for i in range(3000)] + [f"b-{i}" for i in range(2000)])
    lost, doubled = expected - got, got - expected
    assert (sum(lost.values()), sum(doubled.values())) == (0, 0), (
        f"{sum(got.values())} of 5000 read; lost e.g. {sorted(lost)[:5]}, "
        f"doubled e.g. {sorted(doubled)[:5]}")


def _run_to_end(tmp: Path, name: str, bootstrap: str, source: str, sink: str,
                records: int, *extra: str) -> None:
    app = _launch(tmp, name, bootstrap, source, sink, records, *extra)
    try:
        wait_until(lambda: app.poll() is not None, WAIT_S, f"{name} to copy and stop",
                   details=_tail(tmp, name))
        assert app.returncode == 0, _tail(tmp, name)()
    finally:
        procs.kill_group(app.pid)


def test_an_app_run_with_ha_then_without_it_keeps_writing_as_itself(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """One app, one checkpoint directory: run with HA (it leads an epoch >= 1 and
    fences its sink and checkpoints), stopped, then run without HA, then with HA
    again. Each run is the same writer: after each, the sink holds every record
    copied so far exactly once, and no run had a checkpoint refused."""
    source, out = topic_factory("in"), topic_factory("out")
    runs = [("x", ("--ha",)), ("y", ()), ("z", ("--ha",))]
    for n, (prefix, extra) in enumerate(runs, start=1):
        _fill(bootstrap, source, prefix, 1000)
        _run_to_end(tmp_path, "app", bootstrap, source, out, 1000 * n, *extra)
        got = Counter((v or b"").decode() for _, _, v in
                      read_exactly_once(bootstrap, out, kafka_conf={}))
        expected = Counter(f"{p}-{i}" for p, _ in runs[:n] for i in range(1000))
        lost, doubled = expected - got, got - expected
        assert (sum(lost.values()), sum(doubled.values())) == (0, 0), (
            f"after run {n}: {sum(got.values())} of {1000 * n} read; lost e.g. "
            f"{sorted(lost)[:5]}, doubled e.g. {sorted(doubled)[:5]}")
    log_text = (tmp_path / "app.log").read_text(errors="replace")
    assert "refused" not in log_text, _tail(tmp_path, "app")()
    assert "this driver continues epoch 1" in log_text
