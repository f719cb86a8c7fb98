"""CheckpointWriter: its thread, on_done after durability, errors reported, stop flushes."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.entries import checkpoint_files
from walstream.checkpoint.errors import CheckpointWriteError
from walstream.checkpoint.files import read_latest
from walstream.checkpoint.writer import CheckpointWriter

ROOT = Path(__file__).resolve().parents[2]


def _name(t: int) -> str:
    return f"checkpoint-{t:013d}"


def test_writes_on_its_thread_and_on_done_after_the_file_exists(tmp_path: Path) -> None:
    seen: list[tuple[str, bool, int]] = []
    done = threading.Event()
    errors: list[BaseException] = []
    writer = CheckpointWriter(tmp_path, on_error=errors.append)
    try:
        def on_done() -> None:
            path = tmp_path / _name(3000)
            readable = path.exists() and read_latest(tmp_path) == make_data(3000)
            seen.append((threading.current_thread().name, readable, writer.written))
            done.set()

        writer.write(make_data(3000), on_done)
        assert done.wait(10)
    finally:
        writer.stop()
    assert seen == [("checkpoint-writer", True, 1)]
    assert threading.current_thread().name != "checkpoint-writer"
    assert writer.latest_time_ms == 3000
    assert errors == []


def test_write_returns_before_the_file_is_written(tmp_path: Path) -> None:
    gate = threading.Event()
    writer = CheckpointWriter(tmp_path)
    try:
        def hold() -> None:
            gate.wait(10)

        writer.write(make_data(1000), hold)  # holds the thread
        writer.write(make_data(2000))  # returns at once, queued
        assert not (tmp_path / _name(2000)).exists()
    finally:
        gate.set()
        writer.stop()
    assert [t for t, _ in checkpoint_files(tmp_path)] == [2000, 1000]


def test_full_queue_is_reported(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    gate = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(10)

    writer = CheckpointWriter(tmp_path, max_queue=1, on_error=errors.append)
    try:
        writer.write(make_data(1000), hold)
        assert started.wait(10)  # the thread is busy; the queue is empty
        writer.write(make_data(2000))  # fills the queue
        assert errors == []
        writer.write(make_data(3000))  # no room: an error, not a silent drop
        assert len(errors) == 1
        assert isinstance(errors[0], CheckpointWriteError)
        assert "queue full" in str(errors[0])
        assert str(tmp_path) in str(errors[0])
    finally:
        gate.set()
        writer.stop()
    assert [t for t, _ in checkpoint_files(tmp_path)] == [2000, 1000]


def test_unwritable_directory_is_reported_and_on_done_not_called(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    errors: list[BaseException] = []
    got_error = threading.Event()
    called: list[int] = []

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        got_error.set()

    writer = CheckpointWriter(blocker / "cp", on_error=on_error)
    try:
        writer.write(make_data(1000), lambda: called.append(1000))
        assert got_error.wait(10)
    finally:
        writer.stop()
    assert called == []  # never clean WALs on a checkpoint that is not there
    assert len(errors) == 1
    assert isinstance(errors[0], CheckpointWriteError)
    assert "1000" in str(errors[0]) and str(blocker / "cp") in str(errors[0])
    assert writer.written == 0


def test_writer_survives_an_error_and_keeps_writing(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    writer = CheckpointWriter(tmp_path, on_error=errors.append)
    try:
        writer.write(make_data(1000, app_id=None))  # cannot be encoded
        writer.write(make_data(2000))
    finally:
        writer.stop()
    assert len(errors) == 1 and isinstance(errors[0], CheckpointWriteError)
    assert "1000" in str(errors[0])
    assert read_latest(tmp_path) == make_data(2000)
    assert writer.written == 1


def test_stop_flushes_what_is_queued(tmp_path: Path) -> None:
    gate = threading.Event()
    done: list[int] = []
    writer = CheckpointWriter(tmp_path)
    def first() -> None:
        gate.wait(10)
        done.append(1000)

    writer.write(make_data(1000), first)
    for t in range(2000, 7000, 1000):
        writer.write(make_data(t), functools.partial(done.append, t))
    threading.Timer(0.2, gate.set).start()
    writer.stop()  # returns only after everything queued is written
    assert not writer._thread.is_alive()
    assert done == [1000, 2000, 3000, 4000, 5000, 6000]
    assert [t for t, _ in checkpoint_files(tmp_path)] == [6000, 5000, 4000, 3000, 2000, 1000]
    assert writer.written == 6


def test_write_after_stop_is_reported(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    writer = CheckpointWriter(tmp_path, on_error=errors.append)
    writer.stop()
    writer.write(make_data(1000))
    assert len(errors) == 1 and isinstance(errors[0], CheckpointWriteError)
    assert "1000" in str(errors[0])
    writer.stop()  # a second stop returns


def test_on_done_failure_does_not_stop_the_writer(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("cleanup failed")

    writer = CheckpointWriter(tmp_path)
    try:
        writer.write(make_data(1000), boom)
        writer.write(make_data(2000))
    finally:
        writer.stop()
    assert read_latest(tmp_path) == make_data(2000)


_CHILD = """
import sys
from pathlib import Path
from walstream.checkpoint.files import write_checkpoint
from tests.checkpoint.helpers import make_data
d = Path(sys.argv[1])
write_checkpoint(d, make_data(1000))
print("first written", flush=True)
write_checkpoint(d, make_data(2000))
print("second written", flush=True)
"""


def test_kill_point_mid_write_leaves_first_checkpoint_intact(tmp_path: Path) -> None:
    env = {**os.environ, "WALSTREAM_KILL_POINT": "checkpoint.mid_write:2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.splitlines() == ["first written"]
    assert "kill point checkpoint.mid_write reached" in proc.stderr
    # The second one died as a half-written temp file, which the reader ignores.
    tmp = tmp_path / f".{_name(2000)}.tmp"
    assert tmp.exists() and 0 < tmp.stat().st_size < len(make_data(2000).encode())
    assert [p.name for p in tmp_path.glob("checkpoint-*")] == [_name(1000)]
    assert read_latest(tmp_path) == make_data(1000)
    # A restarted writer overwrites the stale temp file and goes on.
    writer = CheckpointWriter(tmp_path)
    writer.write(make_data(2000))
    writer.stop()
    assert read_latest(tmp_path) == make_data(2000)
    assert not tmp.exists()
