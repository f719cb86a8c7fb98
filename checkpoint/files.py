"""Checkpoint files: the write protocol, retention, the clean mark and a reader that
falls back (the background writer that calls them is checkpoint/writer.py; where
files live and how one is published atomically, checkpoint/storage.py).

Write protocol (each step before the next): (1) write ``.checkpoint-<ms>.tmp``,
(2) fsync it, (3) rename it to ``checkpoint-<ms>`` (``checkpoint-<ms>-e<epoch>``
for a writer of a lease epoch above 0, checkpoint/entries.py), (4) fsync the
directory, (5) delete all but the newest ``keep`` checkpoints (the newest ``keep``
eligible ones when the directory holds fences). A crash at any step leaves
the previous checkpoints intact; the reader ignores temp files (docs/ARCHITECTURE.md,
invariant 5: checkpoint before clean). On an fsspec directory, (1)-(2) are one
whole-object write and (4) has no equivalent.

High availability: a driver of lease epoch ``e`` writes its checkpoints as
``checkpoint-<ms>-e<e>``, and a new leader fences the directory
(:func:`walstream.checkpoint.fence_files.write_fence`) before it reads.
:func:`read_latest` and retention apply the fences' rule
(``walstream.checkpoint.fence``); writers below the highest fence refuse.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from walstream.checkpoint.clean_mark import CLEAN_MARK_NAME, decode_mark, encode_mark
from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.entries import checkpoint_entries, checkpoint_name
from walstream.checkpoint.errors import (
    CheckpointFallbackError,
    CorruptCheckpointError,
    CorruptFenceError,
)
from walstream.checkpoint.fence import Rejection, identity
from walstream.checkpoint.fence_files import (
    collect_fences,
    read_fences,
    read_identity,
    refuse_if_fenced,
)
from walstream.checkpoint.storage import (
    check_private,
    child,
    is_url,
    read_bytes,
    remove,
    write_file,
)

log = logging.getLogger(__name__)


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
    path = write_file(
        directory, name, payload,
        before_publish=lambda: refuse_if_fenced(directory, data.epoch,
                                                 data.checkpoint_time_ms),
        mid_write="checkpoint.mid_write")
    refuse_if_fenced(directory, data.epoch, data.checkpoint_time_ms, published=path)
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
    is left for the next round. Then :func:`collect_fences`.

    A fenced writer never gets here (:func:`write_checkpoint` raises first). One
    paused between its last check and a deletion deletes with the view it had; with
    ``keep`` of 2 or more that view keeps its own newest pre-fence checkpoint, which
    is the newest one the new fence lists.
    """
    fences = read_fences(directory)
    entries = checkpoint_entries(directory)
    if not fences:
        for entry in entries[keep:]:
            remove(entry.path)
        return
    kept = 0
    for entry in entries:
        if fences.judges(entry.epoch):
            try:
                rejection = fences.rejection(entry.name, entry.epoch,
                                             read_identity(entry.path))
            except FileNotFoundError:
                continue
            except (OSError, CorruptFenceError):
                continue  # undecidable: kept, never counted as eligible
            if rejection is not None:
                log.info("deleting %s", rejection.describe(str(entry.path)))
                remove(entry.path)
                continue
        if kept < keep:
            kept += 1
        else:
            remove(entry.path)
    collect_fences(directory)




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
    return write_file(directory, CLEAN_MARK_NAME,
                       encode_mark(checkpoint_time_ms, int(time.time() * 1000)))


def read_clean_mark(directory: str | Path) -> int | None:
    """The checkpoint time of the newest published clean mark; None when there is
    none. A damaged mark raises :class:`CorruptCheckpointError`: without it, no
    fallback could be judged safe."""
    path = child(directory, CLEAN_MARK_NAME)
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return None
    return decode_mark(raw, str(path))


def _read_retried(path: Any) -> bytes:
    """The file's bytes; a read error other than a missing file is retried
    :data:`READ_TRIES` times before it is raised."""
    wait = READ_BACKOFF_S
    for attempt in range(1, READ_TRIES + 1):
        try:
            return read_bytes(path)
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
        check_private(Path(directory))
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
