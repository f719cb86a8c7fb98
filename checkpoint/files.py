"""Checkpoint files: atomic writes, fences, and a reader that falls back (the
background writer that calls them is checkpoint/writer.py).

Write protocol (each step before the next): (1) write ``.checkpoint-<ms>.tmp``,
(2) fsync it, (3) rename it to ``checkpoint-<ms>`` (``checkpoint-<ms>-e<epoch>``
for a writer of a lease epoch above 0, see ``walstream.checkpoint.fence``), (4) fsync the
directory, (5) delete all but the newest ``keep`` checkpoints (the newest ``keep``
eligible ones when the directory holds fences). A crash at any step leaves
the previous checkpoints intact; the reader ignores temp files (docs/ARCHITECTURE.md,
invariant 5: checkpoint before clean). Names carry the
batch time, and the reader picks the newest *time*, so a late write of an older
batch never hides a newer one (SPARK-11267 / SPARK-11740).

A directory given as a URL (``s3://bucket/app``, ``gs://``, ``hdfs://``, ``memory://``
...) goes through fsspec (with the filesystem's own package installed, e.g. s3fs):
the same steps with the filesystem's ``pipe`` (one whole-object write: object
stores publish it atomically) for (1)-(2) and ``mv`` for (3); step (4) has no
equivalent there. Local paths (the default, and what the tests run) use the OS.

High availability (issue 29): a driver of lease epoch ``e`` writes its checkpoints
as ``checkpoint-<ms>-e<e>``, and a new leader fences the directory with
:func:`write_fence` before it reads. :func:`read_latest` and retention apply the
fences' rule (``walstream.checkpoint.fence``); writers below the highest fence refuse.

Local directories are private: created 0700 (and ``<dir>/rdds``, the state RDDs'
directory, by :func:`prepare_directory`), checkpoint files 0600 whatever the
umask (fence files too), since a checkpoint holds the whole Spark conf (Kafka passwords included)
and a pickled graph that a restart executes. A directory another user owns or
anyone may write is refused for writing and for reading.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from walstream.checkpoint.clean_mark import CLEAN_MARK_NAME, decode_mark, encode_mark
from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.errors import (
    CheckpointFallbackError,
    CheckpointFencedError,
    CheckpointWriteError,
    CorruptCheckpointError,
    CorruptFenceError,
    UnsafeCheckpointDirError,
)
from walstream.checkpoint.fence import Fence, FenceSet, Rejection, identity
from walstream.killpoints import kill_point

log = logging.getLogger(__name__)

_NAME = re.compile(r"^checkpoint-(\d{13})(?:-e([1-9]\d{0,18}))?$")
_FENCE_NAME = re.compile(r"^fence-e([1-9]\d{0,18})(\.pending)?$")


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


def checkpoint_name(time_ms: int, epoch: int = 0) -> str:
    """``checkpoint-<ms>`` for epoch 0 (the name every release wrote), else
    ``checkpoint-<ms>-e<epoch>``: drivers of different epochs never write the same
    name, so a fenced driver's late write can never replace a newer leader's file."""
    name = f"checkpoint-{time_ms:013d}"
    return f"{name}-e{epoch}" if epoch else name


def fence_name(epoch: int, pending: bool = False) -> str:
    return f"fence-e{epoch}" + (".pending" if pending else "")


def _names(directory: str | Path) -> list[str]:
    """The names in ``directory``, [] when it does not exist."""
    if is_url(directory):
        fs, root = _fs(str(directory).rstrip("/"))
        try:
            return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
        except FileNotFoundError:
            return []
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _child(directory: str | Path, name: str) -> Any:
    if is_url(directory):
        return f"{str(directory).rstrip('/')}/{name}"
    return Path(directory) / name


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint file as its name tells it: batch time, writer's epoch, path."""

    time_ms: int
    epoch: int
    name: str
    path: Any


def checkpoint_entries(directory: str | Path) -> list[CheckpointEntry]:
    """Every checkpoint file, newest time first (of one time, the newest epoch
    first); foreign and temp files ignored. Fences are not applied here."""
    found = [CheckpointEntry(int(m.group(1)), int(m.group(2) or 0), n, _child(directory, n))
             for n in _names(directory) if (m := _NAME.match(n))]
    return sorted(found, key=lambda e: (e.time_ms, e.epoch), reverse=True)


def checkpoint_files(directory: str | Path) -> list[tuple[int, Any]]:
    """``(time_ms, path)`` of every checkpoint file, newest first; foreign files ignored.
    Paths are :class:`~pathlib.Path` for a local directory, URLs for an fsspec one.
    Fences are not applied: :func:`read_latest` is what picks the checkpoint to use."""
    return [(e.time_ms, e.path) for e in checkpoint_entries(directory)]


def _fence_names(directory: str | Path) -> tuple[dict[int, str], dict[int, str]]:
    """``(final, pending)``: epoch -> name of the fence files in ``directory``."""
    final: dict[int, str] = {}
    pending: dict[int, str] = {}
    for n in _names(directory):
        if m := _FENCE_NAME.match(n):
            (pending if m.group(2) else final)[int(m.group(1))] = n
    return final, pending


def highest_fence(directory: str | Path) -> int:
    """The highest epoch any fence file in ``directory`` names, a fence still being
    written (``.pending``) or corrupt included; 0 without fences. Only names are
    read, so a writer's check cannot be fooled by a fence it cannot decode."""
    final, pending = _fence_names(directory)
    return max([*final, *pending], default=0)


def read_fences(directory: str | Path) -> FenceSet:
    """Every finished fence of ``directory``, decoded; a corrupt one is kept as its
    error and raised only when a decision depends on it (:class:`FenceSet`)."""
    final, _ = _fence_names(directory)
    fences: dict[int, tuple[str, Fence | CorruptFenceError]] = {}
    for epoch, name in final.items():
        path = _child(directory, name)
        try:
            fence: Fence | CorruptFenceError = Fence.decode(_read(path), str(path))
        except FileNotFoundError:
            continue  # collected meanwhile: only fences no checkpoint needs are
        except OSError as exc:
            fence = CorruptFenceError(f"fence {path}: unreadable: {exc}", str(path))
        except CorruptFenceError as exc:
            fence = exc
        if isinstance(fence, Fence) and fence.epoch != epoch:
            fence = CorruptFenceError(f"fence {path}: holds epoch {fence.epoch}, not its "
                                      f"name's", str(path))
        fences[epoch] = (str(path), fence)
    return FenceSet(fences)


def _write_file(directory: str | Path, name: str, payload: bytes,
                before_publish: Callable[[], None] | None = None,
                mid_write: str | None = None) -> Any:
    """Publish ``payload`` as ``directory/name`` atomically: a temp file ``.<name>.tmp``
    (0600 locally, fsynced; one whole-object write on fsspec), ``before_publish()``,
    the rename, then (locally) an fsync of the directory. A failure or crash before
    the rename leaves no file of that name changed and no temp file behind.
    ``mid_write`` names the kill point reached halfway through the temp file."""
    if is_url(directory):
        url = str(directory).rstrip("/")
        fs, root = _fs(url)
        fs.makedirs(root, exist_ok=True)
        remote_tmp, remote_final = f"{root}/.{name}.tmp", f"{root}/{name}"
        if mid_write is not None:
            kill_point(mid_write)
        try:
            fs.pipe_file(remote_tmp, payload)
            if before_publish is not None:
                before_publish()
            fs.mv(remote_tmp, remote_final)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm(remote_tmp)
            raise
        return f"{url}/{name}"
    directory = Path(directory)
    _private_dir(directory)
    path, tmp = directory / name, directory / f".{name}.tmp"
    try:
        # 0600 whatever the umask, also over a stale temp file of a wider mode; the
        # rename keeps the mode. Never through a symlink.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:
            os.fchmod(fd, 0o600)
            half = len(payload) // 2
            f.write(payload[:half])
            f.flush()
            if mid_write is not None:
                kill_point(mid_write)
            f.write(payload[half:])
            f.flush()
            os.fsync(f.fileno())
        if before_publish is not None:
            before_publish()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return path


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _remove(path: Any) -> None:
    if isinstance(path, str):
        fs, p = _fs(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(p)
    else:
        Path(path).unlink(missing_ok=True)


def _read(path: Any) -> bytes:
    if isinstance(path, str):
        fs, p = _fs(path)
        return bytes(fs.cat_file(p))
    return Path(path).read_bytes()


def _read_identity(path: Any) -> int:
    """The identity (:func:`walstream.checkpoint.fence.identity`) of the checkpoint at ``path``;
    locally from its last four bytes only."""
    if isinstance(path, str):
        return identity(_read(path))
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 4:
            return -1
        f.seek(size - 4)
        return identity(f.read(4))


def write_fence(directory: str | Path, epoch: int) -> Any:
    """Fence the checkpoints of every epoch below ``epoch``; returns the fence's path.

    The new leader of ``epoch`` calls this once it holds the lease and before it
    reads a checkpoint. In order:

    1. ``fence-e<epoch>.pending`` is published (empty). From here on every writer of
       an older epoch refuses to publish, and one that published meanwhile refuses
       to clean after it (:class:`~walstream.checkpoint.writer.CheckpointWriter`; the
       writer checks names, pending ones included).
    2. The older-epoch checkpoints present now are listed with their identities.
       Every checkpoint that a fenced writer went on to clean after was published
       before its post-publish check, so before step 1, and is in this list.
    3. ``fence-e<epoch>`` is published atomically (0600 locally, like checkpoint
       files), then the pending marker is removed.

    A crash between 1 and 3 leaves the pending marker: it keeps refusing older
    writers, and readers ignore it (no takeover of that epoch completed, so no cut
    was drawn). Calling this again for an epoch that already has its fence returns
    that fence unchanged: a fence is never widened, since a wider one would admit
    what a fenced writer published after the first. Raises
    :class:`CheckpointFencedError` when a fence of a newer epoch exists (the caller
    has lost the lease already) and :class:`CorruptFenceError` when this epoch's
    fence exists and does not decode.
    """
    if epoch < 1:
        raise CheckpointWriteError(f"fence epoch must be at least 1, got {epoch}")
    final, pending = _fence_names(directory)
    newer = max((e for e in [*final, *pending] if e > epoch), default=0)
    if newer:
        raise CheckpointFencedError(
            f"cannot fence {directory} for epoch {epoch}: a fence of epoch {newer} is "
            f"there already (this driver lost the lease)", epoch, newer)
    if epoch in final:
        path = _child(directory, final[epoch])
        Fence.decode(_read(path), str(path))
        return path
    _write_file(directory, fence_name(epoch, pending=True), b"")  # step 1
    listed: dict[str, int] = {}
    for entry in checkpoint_entries(directory):  # step 2
        if entry.epoch >= epoch:
            continue
        try:
            listed[entry.name] = _read_identity(entry.path)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
    fence = Fence(epoch, int(time.time() * 1000), listed)
    path = _write_file(directory, fence_name(epoch), fence.encode())  # step 3
    _remove(_child(directory, fence_name(epoch, pending=True)))
    log.info("checkpoint directory %s fenced for epoch %d (%d older checkpoints listed)",
             directory, epoch, len(listed))
    return path


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


def _refuse_if_fenced(directory: str | Path, epoch: int, time_ms: int,
                      published: Any = None) -> None:
    """Raise :class:`CheckpointFencedError` when a fence (pending ones included) of an
    epoch above the writer's ``epoch`` is in ``directory``."""
    fence_epoch = highest_fence(directory)
    if fence_epoch <= epoch:
        return
    if published is None:
        what = "not written"
    else:
        what = (f"published as {published} while the fence was written; it counts only "
                f"if the fence lists it, and nothing is cleaned after it")
    raise CheckpointFencedError(
        f"checkpoint {time_ms} of epoch {epoch} refused: {directory} is fenced by epoch "
        f"{fence_epoch} (another driver has taken over); {what}", epoch, fence_epoch,
        None if published is None else str(published))


def write_checkpoint(directory: str | Path, data: CheckpointData, keep: int = 10) -> Any:
    """Publish ``data`` as ``checkpoint_name(time, epoch)`` atomically, then retain.

    Fencing: the writer of ``data.epoch`` checks the directory's fences right
    before the rename and refuses (:class:`CheckpointFencedError`, nothing
    published) when one of a newer epoch exists. No check can close the window
    between itself and the rename: a writer paused there publishes after the new
    leader's fence. That late file is harmless because readers take an older-epoch
    checkpoint only when the fence lists it, and the fence lists only what was
    present when it was written; the epoch in the name keeps it from replacing any
    newer leader's file. The check runs again after the rename: when a fence
    appeared meanwhile the call raises the same error, so the caller neither cleans
    nor retains after a checkpoint that may not count. Retention (``keep``) runs
    only after that second check (:func:`_retain`).
    """
    name = checkpoint_name(data.checkpoint_time_ms, data.epoch)
    payload = data.encode()
    path = _write_file(
        directory, name, payload,
        before_publish=lambda: _refuse_if_fenced(directory, data.epoch,
                                                 data.checkpoint_time_ms),
        mid_write="checkpoint.mid_write")
    _refuse_if_fenced(directory, data.epoch, data.checkpoint_time_ms, published=path)
    _retain(directory, keep)
    return path


def _retain(directory: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` eligible checkpoints, and what fences reject.

    Without fences: all but the newest ``keep`` checkpoint files by name, as always.
    With fences, eligibility is the reader's rule (:mod:`walstream.checkpoint.fence`): the
    newest ``keep`` eligible checkpoints are kept, so the one :func:`read_latest`
    returns is never deleted, however many newer files fences reject; files a
    readable fence rejects are deleted (fences are never removed while they judge
    a file, so such a file can never become eligible); a file whose judgement
    depends on a corrupt fence is left alone. Fences are read before checkpoints are
    listed, so a checkpoint published during retention is seen by no fence here and
    is left for the next round. Then :func:`_collect_fences`.

    A fenced writer never gets here (:func:`write_checkpoint` raises first). One
    paused between its last check and a deletion deletes with the view it had; with
    ``keep`` of 2 or more that view keeps its own newest pre-fence checkpoint, which
    is the newest one the new fence lists.
    """
    fences = read_fences(directory)
    entries = checkpoint_entries(directory)
    if not fences:
        for entry in entries[keep:]:
            _remove(entry.path)
        return
    kept = 0
    for entry in entries:
        if fences.judges(entry.epoch):
            try:
                rejection = fences.rejection(entry.name, entry.epoch,
                                             _read_identity(entry.path))
            except FileNotFoundError:
                continue
            except (OSError, CorruptFenceError):
                continue  # undecidable: kept, never counted as eligible
            if rejection is not None:
                log.info("deleting %s", rejection.describe(str(entry.path)))
                _remove(entry.path)
                continue
        if kept < keep:
            kept += 1
        else:
            _remove(entry.path)
    _collect_fences(directory)


def _collect_fences(directory: str | Path) -> None:
    """Delete the fences no reader needs any more.

    The highest finished fence always stays (writers check against it). A lower
    fence of epoch ``y`` is deleted once no checkpoint of an epoch below ``y`` is
    left: fences are listed first, checkpoints after, so a checkpoint of an older
    epoch that a fenced writer publishes after that listing was published after the
    highest fence too, which does not list it and keeps rejecting it. A pending
    marker is deleted once a finished fence of its epoch or a newer one exists; a
    newer pending one is a takeover in progress and stays.
    """
    final, pending = _fence_names(directory)
    if not final:
        return
    top = max(final)
    oldest = min((e.epoch for e in checkpoint_entries(directory)), default=None)
    for epoch, name in final.items():
        if epoch < top and (oldest is None or oldest >= epoch):
            _remove(_child(directory, name))
    for epoch, name in pending.items():
        if epoch <= top:
            _remove(_child(directory, name))


_warned: set[tuple[str, int]] = set()
_WARNED_MAX = 10_000


def _warn_rejected(path: Any, ident: int, rejection: Rejection) -> None:
    """WARNING the first time this process rejects this file with this content,
    DEBUG afterwards (a standby rereads the directory on every reload)."""
    key = (str(path), ident)
    if key in _warned:
        log.debug("%s", rejection.describe(str(path)))
        return
    if len(_warned) >= _WARNED_MAX:
        _warned.clear()
    _warned.add(key)
    log.warning("%s", rejection.describe(str(path)))


#: Reads of one checkpoint file before it counts as unreadable, and the first
#: wait between them (doubling): a transient error is not a reason to fall back.
READ_TRIES = 3
READ_BACKOFF_S = 0.2


def write_clean_mark(directory: str | Path, checkpoint_time_ms: int) -> Any:
    """Publish that the cleanup after checkpoint ``checkpoint_time_ms`` may delete WAL
    data (:mod:`walstream.checkpoint.clean_mark`); call it right before that cleanup, which must
    not run if this raises."""
    return _write_file(directory, CLEAN_MARK_NAME,
                       encode_mark(checkpoint_time_ms, int(time.time() * 1000)))


def read_clean_mark(directory: str | Path) -> int | None:
    """The checkpoint time of the newest published clean mark; None when there is
    none. A damaged mark raises :class:`CorruptCheckpointError`: without it, no
    fallback could be judged safe."""
    path = _child(directory, CLEAN_MARK_NAME)
    try:
        raw = _read(path)
    except FileNotFoundError:
        return None
    return decode_mark(raw, str(path))


def _read_retried(path: Any) -> bytes:
    """The file's bytes; a read error other than a missing file is retried
    :data:`READ_TRIES` times before it is raised."""
    wait = READ_BACKOFF_S
    for attempt in range(1, READ_TRIES + 1):
        try:
            return _read(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except OSError as exc:
            if attempt == READ_TRIES:
                raise
            log.warning("checkpoint %s: read failed (%s), trying again in %.1f s", path,
                        exc, wait)
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")


def read_latest(directory: str | Path) -> CheckpointData | None:
    """The newest eligible checkpoint that reads and validates; older ones when it
    does not, but never one older than the clean mark.

    Eligible: by the fences of the directory (:mod:`walstream.checkpoint.fence`), a checkpoint
    of epoch ``x`` counts only if every fence of a newer epoch lists it with its
    content; a rejected one is logged at WARNING (once per file and content) naming
    it and the fence, and skipped. Raises :class:`CorruptFenceError`, naming the
    fence, when a corrupt fence would decide. Fences are read before checkpoints
    are listed, so a checkpoint published after that by a fenced driver was
    published after the fence and is not listed by it.

    A read error is retried (:data:`READ_TRIES`) before the file counts as
    unreadable. Falling back past an unreadable or invalid checkpoint to an older
    one is refused with :class:`CheckpointFallbackError` when that one is older than
    the clean mark (:mod:`walstream.checkpoint.clean_mark`): the WALs may no longer hold what
    it needs, and restoring it would lose data silently.

    A local directory another user owns or anyone may write is refused
    (:class:`UnsafeCheckpointDirError`): nothing in it is read."""
    if not is_url(directory):
        _check_private(Path(directory))
    fences = read_fences(directory)
    mark = read_clean_mark(directory)
    unusable: str | None = None  # the newest checkpoint that could not be restored
    for entry in checkpoint_entries(directory):
        path = entry.path
        try:
            raw = _read_retried(path)
        except FileNotFoundError:
            continue  # removed by retention since it was listed
        except OSError as exc:
            log.warning("checkpoint %s is unreadable, trying an older one: %s", path, exc)
            unusable = unusable or str(path)
            continue
        if fences.judges(entry.epoch):
            ident = identity(raw)
            rejection = fences.rejection(entry.name, entry.epoch, ident)
            if rejection is not None:
                _warn_rejected(path, ident, rejection)
                continue
        try:
            data = CheckpointData.decode(raw, str(path))
        except CorruptCheckpointError as exc:
            log.warning("checkpoint %s is unreadable, trying an older one: %s", path, exc)
            unusable = unusable or str(path)
            continue
        if data.checkpoint_time_ms != entry.time_ms:
            log.warning("checkpoint %s holds time %d, not its name's; skipped", path,
                        data.checkpoint_time_ms)
            unusable = unusable or str(path)
            continue
        if data.epoch != entry.epoch:
            log.warning("checkpoint %s holds epoch %d, not its name's; skipped", path,
                        data.epoch)
            unusable = unusable or str(path)
            continue
        if unusable is not None and mark is not None and data.checkpoint_time_ms < mark:
            raise CheckpointFallbackError(
                f"checkpoint {unusable} cannot be restored, and the next older one, "
                f"{path} (batch time {data.checkpoint_time_ms}), is older than the WAL "
                f"cleanup after checkpoint {mark}: the data it needs may be gone. "
                f"Repair or restore {unusable}; nothing was restored")
        return data
    if unusable is not None and mark is not None:
        raise CheckpointFallbackError(
            f"checkpoint {unusable} cannot be restored and no older one is usable, while "
            f"the WALs were cleaned after checkpoint {mark}: starting empty would lose "
            f"data. Repair or restore {unusable}")
    return None
