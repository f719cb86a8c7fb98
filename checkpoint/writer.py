"""CheckpointWriter: checkpoints written on one background thread from a bounded queue.

Each checkpoint is written by :func:`~walstream.checkpoint.files.write_checkpoint`
(atomic, fence-checked); only once it is durable does the caller's ``on_done`` run,
which is where the caller cleans its WALs: checkpoint before clean
(docs/ARCHITECTURE.md, invariant 5).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.errors import CheckpointFencedError, CheckpointWriteError
from walstream.checkpoint.files import write_checkpoint
from walstream.checkpoint.storage import is_url
from walstream.killpoints import kill_point

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Writes checkpoints on one thread from a bounded queue.

    ``write(data, on_done)`` returns at once; ``on_done`` runs after the file is
    durable (the caller cleans WALs there: checkpoint before clean). A full queue
    or a failing disk is an error reported to ``on_error``, never a silent drop.

    ``epoch`` is the writer's lease epoch (0 without high availability); each
    checkpoint is written with it (``data.epoch`` must be 0 or the same). Right
    before each write and again after it the directory's fences are checked
    (:func:`write_checkpoint`): once a fence of a newer epoch is there the writer is
    fenced for good. It reports :class:`CheckpointFencedError` to ``on_error``
    (once), never runs ``on_done`` for that checkpoint, and refuses every later one
    without touching the directory.
    """

    def __init__(self, directory: str | Path, keep: int = 10, max_queue: int = 100,
                 on_error: Callable[[BaseException], None] | None = None,
                 epoch: int = 0) -> None:
        if epoch < 0:
            raise CheckpointWriteError(f"checkpoint writer epoch {epoch} is negative")
        self.directory: str | Path = directory if is_url(directory) else Path(directory)
        self.keep = keep
        self.epoch = epoch
        self._queue: queue.Queue[tuple[CheckpointData, Callable[[], None] | None] | None] = \
            queue.Queue(max_queue)
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self.written = 0
        self.latest_time_ms = -1
        self.fenced: CheckpointFencedError | None = None
        self._stopped = False
        self._thread.start()

    def write(self, data: CheckpointData, on_done: Callable[[], None] | None = None) -> None:
        if data.epoch not in (0, self.epoch):
            self._fail(CheckpointWriteError(
                f"checkpoint {data.checkpoint_time_ms} carries epoch {data.epoch}, but "
                f"this writer writes epoch {self.epoch}"))
            return
        if self._stopped:  # nothing would ever take it off the queue
            self._fail(CheckpointWriteError(
                f"checkpoint writer for {self.directory} is stopped: checkpoint "
                f"{data.checkpoint_time_ms} not written"))
            return
        try:
            self._queue.put_nowait((replace(data, epoch=self.epoch), on_done))
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
            if self.fenced is not None:
                log.debug("checkpoint %d not written: writer fenced by epoch %d",
                          data.checkpoint_time_ms, self.fenced.fence_epoch)
                continue
            try:
                write_checkpoint(self.directory, data, self.keep)
                log.debug("checkpoint %d written to %s", data.checkpoint_time_ms,
                          self.directory)
                self.written += 1
                self.latest_time_ms = max(self.latest_time_ms, data.checkpoint_time_ms)
            except CheckpointFencedError as exc:
                self.fenced = exc
                self._fail(exc)
                continue
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
