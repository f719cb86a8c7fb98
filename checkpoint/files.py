"""Checkpoint files: atomic writes on one background thread, and a reader that falls back.

Write protocol (each step before the next): (1) write ``.checkpoint-<ms>.tmp``,
(2) fsync it, (3) rename it to ``checkpoint-<ms>``, (4) fsync the directory,
(5) delete all but the newest ``keep`` checkpoints. A crash at any step leaves
the previous checkpoints intact; the reader ignores temp files. Names carry the
batch time, and the reader picks the newest *time*, so a late write of an older
batch never hides a newer one (SPARK-11267 / SPARK-11740).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from collections.abc import Callable
from pathlib import Path

from checkpoint.data import CheckpointData
from checkpoint.errors import CheckpointWriteError, CorruptCheckpointError
from walstream.killpoints import kill_point

log = logging.getLogger(__name__)

_NAME = re.compile(r"^checkpoint-(\d{13})$")


def checkpoint_files(directory: Path) -> list[tuple[int, Path]]:
    """``(time_ms, path)`` of every checkpoint file, newest first; foreign files ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), directory / name))
    return sorted(found, reverse=True)


def write_checkpoint(directory: Path, data: CheckpointData, keep: int = 10) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"checkpoint-{data.checkpoint_time_ms:013d}"
    tmp = directory / f".checkpoint-{data.checkpoint_time_ms:013d}.tmp"
    payload = data.encode()
    try:
        with open(tmp, "wb") as f:
            half = len(payload) // 2
            f.write(payload[:half])
            f.flush()
            kill_point("checkpoint.mid_write")
            f.write(payload[half:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failing disk must not pile up partial temp files
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    for _, old in checkpoint_files(directory)[keep:]:
        old.unlink(missing_ok=True)
    return final


def read_latest(directory: Path) -> CheckpointData | None:
    """The newest checkpoint that reads and validates; older ones when it does not."""
    for time_ms, path in checkpoint_files(directory):
        try:
            data = CheckpointData.decode(path.read_bytes(), str(path))
        except (OSError, CorruptCheckpointError) as exc:
            log.warning("checkpoint %s is unreadable, trying an older one: %s", path, exc)
            continue
        if data.checkpoint_time_ms != time_ms:
            log.warning("checkpoint %s holds time %d, not its name's; skipped", path,
                        data.checkpoint_time_ms)
            continue
        return data
    return None


class CheckpointWriter:
    """Writes checkpoints on one thread from a bounded queue.

    ``write(data, on_done)`` returns at once; ``on_done`` runs after the file is
    durable (the caller cleans WALs there: DESIGN.md invariant 5). A full queue
    or a failing disk is an error reported to ``on_error``, never a silent drop.
    """

    def __init__(self, directory: str | Path, keep: int = 10, max_queue: int = 100,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self._queue: queue.Queue[tuple[CheckpointData, Callable[[], None] | None] | None] = \
            queue.Queue(max_queue)
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self.written = 0
        self.latest_time_ms = -1
        self._stopped = False
        self._thread.start()

    def write(self, data: CheckpointData, on_done: Callable[[], None] | None = None) -> None:
        if self._stopped:  # nothing would ever take it off the queue
            self._fail(CheckpointWriteError(
                f"checkpoint writer for {self.directory} is stopped: checkpoint "
                f"{data.checkpoint_time_ms} not written"))
            return
        try:
            self._queue.put_nowait((data, on_done))
        except queue.Full:
            self._fail(CheckpointWriteError(
                f"checkpoint queue full ({self._queue.maxsize}): the disk at "
                f"{self.directory} is not keeping up"))

    def _fail(self, exc: BaseException) -> None:
        log.error("%s", exc)
        if self._on_error is not None:
            self._on_error(exc)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            data, on_done = item
            try:
                write_checkpoint(self.directory, data, self.keep)
                self.written += 1
                self.latest_time_ms = max(self.latest_time_ms, data.checkpoint_time_ms)
            except Exception as exc:  # any failure, or this thread dies and writes pile up
                self._fail(CheckpointWriteError(
                    f"cannot write checkpoint {data.checkpoint_time_ms} to {self.directory}: "
                    f"{exc}"))
                continue
            if on_done is not None:
                kill_point("checkpoint.after_write_before_clean")
                try:
                    on_done()
                except Exception:
                    log.exception("after checkpoint %d: cleanup failed", data.checkpoint_time_ms)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop."""
        self._stopped = True
        self._queue.put(None)
        self._thread.join(timeout_s)
