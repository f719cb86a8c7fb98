"""A Structured Streaming query over ``format("walstream")``, killed with SIGKILL
(its driver twice, once right after a commit cleaned the logs; a receiver's worker
once) and restarted with the same
``checkpointLocation``: the file sink's committed files hold every item exactly
once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream import procs
from walstream.testing import wait_until
from walstream.testing.file_sink import committed_lines

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300.0  # a restart on a loaded 2-core machine: Spark, the replay, a batch
POLL_S = 0.5


class App:
    """The structured app in its own process group, restartable."""

    def __init__(self, tmp: Path, bootstrap: str, name: str, total: int,
                 extra: tuple[str, ...] = ()) -> None:
        self.ckpt, self.sink, self.log = tmp / "ckpt", tmp / "sink", tmp / "app.log"
        self.arm_file = tmp / "kill-point"
        self.bootstrap, self.name, self.total = bootstrap, name, total
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.bootstrap,
                   SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(ROOT), WALSTREAM_KILL_POINT_FILE=str(self.arm_file))
        env.pop("WALSTREAM_KILL_POINT", None)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"\n=== start {self.starts} ===\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "walstream.testing.structured_app", str(self.ckpt),
                 str(self.sink), "--name", self.name, "--total", str(self.total),
                 "--rate", "400", "--max-records-per-trigger", "700",
                 "--clean-margin-ms", "2000", *self.extra],
                env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None:
            assert procs.kill_group(self.proc.pid), "the app's processes survived SIGKILL"
            self.proc.poll()

    def arm(self, point: str) -> None:
        self.arm_file.write_text(point)

    def rows(self) -> int:
        return len(committed_lines(self.sink))

    def sink_values(self) -> list[str]:
        """The KafkaSink topic's records, each micro-batch's attempt read once."""
        from walstream.driver.sink.kafka_sink import read_exactly_once

        topic = self.extra[self.extra.index("--kafka-sink") + 1]
        return [(v or b"").decode() for _, _, v in
                read_exactly_once(self.bootstrap, topic, kafka_conf={})]

    def tail(self) -> Callable[[], str]:
        return lambda: self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def wait_rows(self, n: int, what: str) -> None:
        count = (lambda: len(self.sink_values())) if "--kafka-sink" in self.extra \
            else self.rows
        wait_until(lambda: count() >= n, WAIT_S, what, poll_s=POLL_S * 4 if
                   "--kafka-sink" in self.extra else POLL_S, details=self.tail(),
                   abort=self._died)

    def _died(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"the app exited with {self.proc.returncode}"
        return None


def test_sigkills_of_driver_and_receiver_leave_the_file_sink_exactly_once(
    bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    total = 6000
    app = App(tmp_path, bootstrap, unique_name("ss"), total)
    app.start()
    try:
        app.wait_rows(700, "the first micro-batches")
        # A receiver's worker dies between storing a block and reporting it: the
        # relaunched receiver resumes after what the driver acknowledged.
        app.arm("receiver.after_store_before_report:2")
        wait_until(lambda: not app.arm_file.exists(), WAIT_S, "the receiver kill point",
                   poll_s=POLL_S, details=app.tail())
        app.wait_rows(2000, "rows after the receiver's relaunch")
        # The driver dies right after logging an allocation, before Spark has the
        # offset that names it: the restarted query must be given the same blocks.
        app.arm("tracker.after_allocation_logged:1")
        wait_until(lambda: app.proc is not None and app.proc.poll() is not None, WAIT_S,
                   "the driver to die at tracker.after_allocation_logged", poll_s=POLL_S,
                   details=app.tail())
        app.kill()  # the rest of its group: the JVM and the Python workers
        before = app.rows()
        app.start()
        app.wait_rows(before + 700, "rows after the first driver restart")
        # The driver dies right after a commit cleaned the logs: the restarted query
        # must still find every block its uncommitted micro-batches read.
        app.arm("structured.after_commit_clean:2")
        wait_until(lambda: app.proc is not None and app.proc.poll() is not None, WAIT_S,
                   "the driver to die at structured.after_commit_clean", poll_s=POLL_S,
                   details=app.tail())
        app.kill()
        app.start()
        app.wait_rows(total, "every item in the sink")
    finally:
        app.kill()
    counts = Counter(_value(line) for line in committed_lines(app.sink))
    expected = Counter(f"item-{i}" for i in range(total))
    lost = sorted(expected - counts)
    doubled = sorted(counts - expected)
    assert (len(lost), len(doubled)) == (0, 0), \
        f"lost {len(lost)} (e.g. {lost[:5]}), doubled {len(doubled)} (e.g. {doubled[:5]})"
    assert app.starts == 3


def _value(line: str) -> str:
    import json

    return str(json.loads(line)["value"])


def test_a_kafka_source_into_kafka_sink_by_foreach_batch_is_exactly_once_across_sigkills(
    bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str],
    topic_factory: Callable[..., str],
) -> None:
    from confluent_kafka import Producer

    total = 4000
    source, sink = topic_factory("src", partitions=2), topic_factory("sink")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def produce(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            producer.produce(source, f"rec-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0

    app = App(tmp_path, bootstrap, unique_name("ks"), total,
              ("--kafka-source", source, "--kafka-sink", sink))
    produce(0, 1500)
    app.start()
    try:
        app.wait_rows(700, "the first micro-batches in the sink")
        # The receiver's worker dies at its second block stored after this: new
        # records, a second apart, so that there are two blocks.
        app.arm("receiver.after_store_before_report:2")
        produce(1500, 2000)
        time.sleep(1.0)
        produce(2000, 2500)
        wait_until(lambda: not app.arm_file.exists(), WAIT_S, "the receiver kill point",
                   poll_s=POLL_S, details=app.tail())
        app.wait_rows(1600, "records after the receiver's relaunch")
        app.kill()  # the driver, mid-run
        produce(2500, total)
        # The restarted driver dies right after logging its first allocation (of the
        # records produced while it was down; the micro-batch it re-runs first was
        # allocated before the kill and logs nothing new).
        app.arm("tracker.after_allocation_logged:1")
        app.start()
        wait_until(lambda: app.proc is not None and app.proc.poll() is not None, WAIT_S,
                   "the driver to die at tracker.after_allocation_logged", poll_s=POLL_S,
                   details=app.tail())
        app.kill()
        app.start()
        app.wait_rows(total, "every record in the sink")
    finally:
        app.kill()
    counts = Counter(app.sink_values())
    expected = Counter(f"rec-{i}" for i in range(total))
    lost, doubled = sorted(expected - counts), sorted(counts - expected)
    assert (len(lost), len(doubled)) == (0, 0), \
        f"lost {len(lost)} (e.g. {lost[:5]}), doubled {len(doubled)} (e.g. {doubled[:5]})"
