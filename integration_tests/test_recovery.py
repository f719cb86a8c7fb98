"""A driver killed with SIGKILL (its JVM and workers too) and restarted with getOrCreate
gives the same final totals as an uninterrupted run: nothing short, nothing doubled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream import procs
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.testing import wait_until
from walstream.testing.recovery_app import expected_counts

# Waits are bounded generously: on a loaded 2-core machine (CI beside a chaos soak) a
# restarted run once needed more than 180 s to finish.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
ROOT = Path(__file__).resolve().parents[1]


def _start(ckpt: Path, out: Path, bootstrap: str, total: int,
           kill_point: str = "", master: str = "", window: int = 0) -> subprocess.Popen[bytes]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    if master:  # as spark-submit --master would: a new environment's master
        env["PYSPARK_SUBMIT_ARGS"] = f"--master {master} pyspark-shell"
    env.pop("WALSTREAM_KILL_POINT", None)
    if kill_point:
        env["WALSTREAM_KILL_POINT"] = kill_point
    return subprocess.Popen(
        [sys.executable, "-m", "walstream.testing.recovery_app", str(ckpt), str(out),
         "--total", str(total), "--rate", "800", "--window", str(window)],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(out.parent / "app.log", "ab"),
        start_new_session=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    assert procs.kill_group(proc.pid), "the app's processes survived SIGKILL"
    proc.poll()


POLL_S = 0.2  # the pause between polls of the app's files


def _tail(log: Path) -> Callable[[], str]:
    """The end of the app's log, read when a wait fails (``details=``)."""
    return lambda: log.read_text(errors="replace")[-3000:] if log.exists() else ""


def test_sigkill_driver_and_restart_with_get_or_create_is_exactly_once(
    bootstrap: str, tmp_path: Path
) -> None:
    total = 12000
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    log = tmp_path / "app.log"
    expected = expected_counts(11, total)
    proc = _start(ckpt, out, bootstrap, total, window=WINDOW)
    try:
        # Let it checkpoint and process part of the stream, then kill it mid-run.
        # Wait for a reliable checkpoint of the state RDD, so recovery restores it.
        wait_until(lambda: len(list(ckpt.glob("checkpoint-*"))) >= 3 and
                   any((ckpt / "rdds").rglob("rdd-*")) and
                   (out / "totals.json").exists() and
                   0 < sum(json.loads((out / "totals.json").read_text()).values())
                   < sum(expected.values()) * 0.7, 120, "a run in progress",
                   poll_s=POLL_S, details=_tail(log))
        _kill_group(proc)
        before = sum(json.loads((out / "totals.json").read_text()).values())
        assert before < sum(expected.values())
        _check_inspect(ckpt, bootstrap)
        assert json.loads((out / "master.json").read_text()) == "local[3]"
        # Restored from the checkpoint's pickled graph (setupFunc, which would set
        # local[3], is not called): the new environment's master is taken.
        proc = _start(ckpt, out, bootstrap, total, master="local[2]", window=WINDOW)
        wait_until(lambda: (out / "done").exists(), 420, "the restarted run to finish",
                   poll_s=POLL_S, details=_tail(log))
        assert json.loads((out / "master.json").read_text()) == "local[2]"
        time.sleep(2)  # a batch or two more: totals must not move past the truth
    finally:
        _kill_group(proc)
    totals = json.loads((out / "totals.json").read_text())
    lost = sum((expected[w] - totals.get(w, 0)) for w in expected if totals.get(w, 0) < expected[w])
    doubled = sum((totals[w] - expected.get(w, 0)) for w in totals
                  if totals[w] > expected.get(w, 0))
    assert (lost, doubled) == (0, 0), f"lost {lost}, doubled {doubled}"
    assert totals == expected
    # Per-batch outputs, keyed by batch time, add up to every word exactly once.
    per_batch = [json.loads(p.read_text()) for p in out.glob("batch-*.json")]
    assert sum(per_batch) == sum(expected.values())
    _check_windows(out)


WINDOW = 5  # batches; >= 5 slides, so the window is updated with the inverse function


def _check_windows(out: Path) -> None:
    """reduceByKeyAndWindow with an inverse, across the SIGKILL: every window's count
    equals the sum of its batches' counts (restored window state neither lost nor
    counted twice)."""
    batches = {int(p.stem.split("-")[1]): json.loads(p.read_text())
               for p in out.glob("batch-*.json")}
    windows = {int(p.stem.split("-")[1]): json.loads(p.read_text())
               for p in out.glob("window-*.json")}
    step = min(b - a for a, b in zip(sorted(batches), sorted(batches)[1:], strict=False))
    checked = 0
    for t, n in sorted(windows.items()):
        times = [t - i * step for i in range(WINDOW)]
        if all(x in batches for x in times):  # the first windows start before batch 1
            assert n == sum(batches[x] for x in times), (t, n, [batches[x] for x in times])
            checked += 1
    assert checked >= 10, f"only {checked} complete windows to check"


KILL_POINTS = [
    "checkpoint.mid_write:3",
    "checkpoint.after_write_before_clean:3",
    "tracker.after_allocation_logged:3",
    "tracker.after_add_block_before_answer:4",
    "batch.during_output:3",
    "receiver.after_store_before_report:4",  # kills the receiver's worker, not the driver
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_named_kill_point_then_restart_is_exactly_once(
    point: str, bootstrap: str, tmp_path: Path
) -> None:
    total = 2500
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    log = tmp_path / "app.log"
    expected = expected_counts(11, total)
    proc = _start(ckpt, out, bootstrap, total, kill_point=point)
    try:
        wait_until(lambda: proc.poll() is not None or (out / "done").exists(), 420,
                   f"the kill point {point} or the end", poll_s=POLL_S, details=_tail(log))
        text = log.read_text(errors="replace")
        assert f"kill point {point.split(':')[0]} reached" in text, text[-3000:]
        if proc.poll() is not None:  # the driver died: restart it, unarmed
            assert proc.returncode == -signal.SIGKILL
            _kill_group(proc)
            proc = _start(ckpt, out, bootstrap, total)
        wait_until(lambda: (out / "done").exists(), 420, "the run to finish",
                   poll_s=POLL_S, details=_tail(log))
        time.sleep(2)
    finally:
        _kill_group(proc)
    totals = json.loads((out / "totals.json").read_text())
    assert totals == expected
    assert sum(json.loads(p.read_text()) for p in out.glob("batch-*.json")) == \
        sum(expected.values())


def _check_inspect(ckpt: Path, bootstrap: str) -> None:
    """`walstream inspect` shows what the restart will start from."""
    from walstream.checkpoint.entries import checkpoint_files
    from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker

    proc = subprocess.run([sys.executable, "-m", "walstream.cli", "inspect", str(ckpt),
                           "--bootstrap", bootstrap], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["checkpoint_time_ms"] == checkpoint_files(ckpt)[0][0]
    replayed = ReceivedBlockTracker([0], open_driver_wal(bootstrap, shown["app_id"]))
    try:
        assert shown["tracker"] == replayed.state().to_json()
        assert shown["positions"]["0"][0]["until_offset"] == \
            replayed.positions(0)[0].until_offset > 0
    finally:
        replayed.stop()
