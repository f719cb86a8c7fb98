"""Running :mod:`walstream.testing.copy_app` from a test: its input written, the app
launched in a process group of its own (log in ``<work>/<name>.log``, checkpoint in
``<work>/<name>-ckpt``), waited for, and what it wrote to its sink read exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from walstream import procs
from walstream.testing.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 300.0


def fill(bootstrap: str, topic: str, prefix: str, n: int) -> None:
    """Write ``<prefix>-0`` .. ``<prefix>-<n-1>`` to partition 0 of ``topic``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"{prefix}-{i}".encode(), partition=0)
        if i % 1000 == 999:
            p.poll(0)
    if p.flush(60) != 0:
        raise RuntimeError(f"{topic}: records not acknowledged")


def launch(work: Path, name: str, bootstrap: str, source: str, sink: str,
           records: int, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with open(work / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "walstream.testing.copy_app", str(work / f"{name}-ckpt"),
             str(work / name), "--bootstrap", bootstrap, "--input", source, "--sink", sink,
             "--records", str(records), *extra],
            env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True,
            preexec_fn=procs.die_with_parent)


def tail(work: Path, *names: str) -> Callable[[], str]:
    """The end of each named app's log (a wait's ``details``)."""
    def show() -> str:
        return "\n".join(f"--- {n}:\n" + (work / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in names if (work / f"{n}.log").exists())
    return show


def run_to_end(work: Path, name: str, bootstrap: str, source: str, sink: str,
               records: int, *extra: str) -> None:
    """Launch the app and wait until it copied ``records`` and exited 0."""
    app = launch(work, name, bootstrap, source, sink, records, *extra)
    try:
        wait_until(lambda: app.poll() is not None, WAIT_S, f"{name} to copy and stop",
                   details=tail(work, name))
        if app.returncode != 0:
            raise AssertionError(f"{name} exited {app.returncode}\n{tail(work, name)()}")
    finally:
        procs.kill_group(app.pid)


def sink_values(bootstrap: str, sink: str) -> Counter[str]:
    """The sink's values, each committed attempt read once."""
    from walstream.driver.sink.kafka_sink import read_exactly_once

    return Counter((v or b"").decode() for _, _, v in
                   read_exactly_once(bootstrap, sink, kafka_conf={}))


def lost_and_doubled(got: Counter[str], expected: Counter[str]) -> tuple[int, int]:
    return sum((expected - got).values()), sum((got - expected).values())
