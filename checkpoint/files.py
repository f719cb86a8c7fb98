"""Checkpoint files: atomic writes on one background thread, and a reader that falls back.

Write protocol (each step before the next): (1) write ``.checkpoint-<ms>.tmp``,
(2) fsync it, (3) rename it to ``checkpoint-<ms>``, (4) fsync the directory,
(5) delete all but the newest ``keep`` checkpoints. A crash at any step leaves
the previous checkpoints intact; the reader ignores temp files (docs/ARCHITECTURE.md,
invariant 5: checkpoint before clean). Names carry the
batch time, and the reader picks the newest *time*, so a late write of an older
batch never hides a newer one (SPARK-11267 / SPARK-11740).

A directory given as a URL (``s3://bucket/app``, ``gs://``, ``hdfs://``, ``memory://``
...) goes through fsspec (with the filesystem's own package installed, e.g. s3fs):
the same steps with the filesystem's ``pipe`` (one whole-object write: object
stores publish it atomically) for (1)-(2) and ``mv`` for (3); step (4) has no
equivalent there. Local paths (the default, and what the tests run) use the OS.

Local directories are private: created 0700 (and ``<dir>/rdds``, the state RDDs'
directory, by :func:`prepare_directory`), checkpoint files 0600 whatever the
umask, since a checkpoint holds the whole Spark conf (Kafka passwords included)
and a pickled graph that a restart executes. A directory another user owns or
anyone may write is refused for writing and for reading.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoint.data import CheckpointData
from checkpoint.errors import (
    CheckpointWriteError,
    CorruptCheckpointError,
    UnsafeCheckpointDirError,
)
from walstream.killpoints import kill_point

log = logging.getLogger(__name__)

_NAME = re.compile(r"^checkpoint-(\d{13})$")


def is_url(directory: str | Path) -> bool:
    return isinstance(directory, str) and "://" in directory and \
        not directory.startswith("file://")


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - a dependency of ours
        raise CheckpointWriteError(f"checkpoint directory {url}: fsspec is needed") from exc
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise CheckpointWriteError(
            f"checkpoint directory {url}: no filesystem for it ({exc}); install the "
            "fsspec implementation for that scheme (s3fs, gcsfs, ...)") from exc
    return fs, str(path).rstrip("/")


def checkpoint_files(directory: str | Path) -> list[tuple[int, Any]]:
    """``(time_ms, path)`` of every checkpoint file, newest first; foreign files ignored.
    Paths are :class:`~pathlib.Path` for a local directory, URLs for an fsspec one."""
    if is_url(directory):
        url = str(directory).rstrip("/")
        fs, root = _fs(url)
        try:
            names = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(((int(m.group(1)), f"{url}/{n}") for n in names
                       if (m := _NAME.match(n))), reverse=True)
    directory = Path(directory)
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


def _write_remote(url: str, data: CheckpointData, keep: int) -> str:
    fs, root = _fs(url.rstrip("/"))
    fs.makedirs(root, exist_ok=True)
    name = f"checkpoint-{data.checkpoint_time_ms:013d}"
    tmp, final = f"{root}/.{name}.tmp", f"{root}/{name}"
    kill_point("checkpoint.mid_write")
    try:
        fs.pipe_file(tmp, data.encode())  # steps 1-2: one whole-object write
        fs.mv(tmp, final)  # step 3
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise
    for _, old in checkpoint_files(url)[keep:]:  # step 5
        fs.rm(_fs(old)[1])
    return f"{url.rstrip('/')}/{name}"


def _read(path: Any) -> bytes:
    if isinstance(path, str):
        fs, p = _fs(path)
        return bytes(fs.cat_file(p))
    return Path(path).read_bytes()


STATE_RDD_SUBDIR = "rdds"


def _check_private(path: Path) -> None:
    """Refuse a directory another user owns or anyone may write: they could read
    the conf's secrets or plant a checkpoint whose pickled graph a restart runs."""
    try:
        st = os.stat(path)  # a symlink is judged by what it points to
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCheckpointDirError(f"checkpoint directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafeCheckpointDirError(
            f"checkpoint directory {path} is owned by uid {st.st_uid}, not by this user "
            f"(uid {os.geteuid()}): its checkpoints hold the Spark conf and code a restart "
            "runs; use a directory of your own")
    if st.st_mode & stat.S_IWOTH:
        raise UnsafeCheckpointDirError(
            f"checkpoint directory {path} is world-writable (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): anyone could plant a checkpoint a restart "
            f"would run; chmod it (e.g. 0700) or use another directory")


def _private_dir(path: Path) -> None:
    """``path`` exists, ours and not world-writable; created 0700 when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # the umask may have taken bits away; ours, just made
    except FileExistsError:
        pass
    _check_private(path)


def prepare_directory(directory: str | Path) -> None:
    """Make a local checkpoint directory and its state-RDD subdirectory ``rdds``
    ready before anything writes there: created 0700 when missing, refused with
    :class:`UnsafeCheckpointDirError` when another user owns either or anyone may
    write it. Spark's ``setCheckpointDir`` would create them with Hadoop's default
    0755, so this runs first. A URL directory is left to its filesystem."""
    if is_url(directory):
        return
    directory = Path(directory)
    _private_dir(directory)
    _private_dir(directory / STATE_RDD_SUBDIR)


def write_checkpoint(directory: str | Path, data: CheckpointData, keep: int = 10) -> Any:
    if is_url(directory):
        return _write_remote(str(directory), data, keep)
    directory = Path(directory)
    _private_dir(directory)
    final = directory / f"checkpoint-{data.checkpoint_time_ms:013d}"
    tmp = directory / f".checkpoint-{data.checkpoint_time_ms:013d}.tmp"
    payload = data.encode()
    try:
        # 0600 whatever the umask, also over a stale temp file of a wider mode; the
        # rename keeps the mode. Never through a symlink.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:
            os.fchmod(fd, 0o600)
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


def read_latest(directory: str | Path) -> CheckpointData | None:
    """The newest checkpoint that reads and validates; older ones when it does not.
    A local directory another user owns or anyone may write is refused
    (:class:`UnsafeCheckpointDirError`): nothing in it is read."""
    if not is_url(directory):
        _check_private(Path(directory))
    for time_ms, path in checkpoint_files(directory):
        try:
            data = CheckpointData.decode(_read(path), str(path))
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
    durable (the caller cleans WALs there: checkpoint before clean). A full queue
    or a failing disk is an error reported to ``on_error``, never a silent drop.
    """

    def __init__(self, directory: str | Path, keep: int = 10, max_queue: int = 100,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self.directory: str | Path = directory if is_url(directory) else Path(directory)
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
                log.debug("checkpoint %d written to %s", data.checkpoint_time_ms,
                          self.directory)
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
