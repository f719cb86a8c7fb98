"""Fence files of a checkpoint directory: how a new leader of lease epoch ``e``
draws its cut (:func:`write_fence`), how writers of older epochs learn they are
fenced (:func:`refuse_if_fenced`, by names alone), and which fences retention may
delete (:func:`collect_fences`). The fence record and the rule that judges a
checkpoint by it are :mod:`walstream.checkpoint.fence`.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from walstream.checkpoint.entries import checkpoint_entries
from walstream.checkpoint.errors import (
    CheckpointFencedError,
    CheckpointWriteError,
    CorruptFenceError,
)
from walstream.checkpoint.fence import Fence, FenceSet, identity
from walstream.checkpoint.storage import child, list_names, read_bytes, remove, write_file

log = logging.getLogger(__name__)

_FENCE_NAME = re.compile(r"^fence-e([1-9]\d{0,18})(\.pending)?$")


def fence_name(epoch: int, pending: bool = False) -> str:
    return f"fence-e{epoch}" + (".pending" if pending else "")


def fence_names(directory: str | Path) -> tuple[dict[int, str], dict[int, str]]:
    """``(final, pending)``: epoch -> name of the fence files in ``directory``."""
    final: dict[int, str] = {}
    pending: dict[int, str] = {}
    for n in list_names(directory):
        if m := _FENCE_NAME.match(n):
            (pending if m.group(2) else final)[int(m.group(1))] = n
    return final, pending


def highest_fence(directory: str | Path) -> int:
    """The highest epoch any fence file in ``directory`` names, a fence still being
    written (``.pending``) or corrupt included; 0 without fences. Only names are
    read, so a writer's check cannot be fooled by a fence it cannot decode."""
    final, pending = fence_names(directory)
    return max([*final, *pending], default=0)


def read_fences(directory: str | Path) -> FenceSet:
    """Every finished fence of ``directory``, decoded; a corrupt one is kept as its
    error and raised only when a decision depends on it (:class:`FenceSet`)."""
    final, _ = fence_names(directory)
    fences: dict[int, tuple[str, Fence | CorruptFenceError]] = {}
    for epoch, name in final.items():
        path = child(directory, name)
        try:
            fence: Fence | CorruptFenceError = Fence.decode(read_bytes(path), str(path))
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


def read_identity(path: Any) -> int:
    """The identity (:func:`walstream.checkpoint.fence.identity`) of the checkpoint at ``path``;
    locally from its last four bytes only."""
    if isinstance(path, str):
        return identity(read_bytes(path))
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
    final, pending = fence_names(directory)
    newer = max((e for e in [*final, *pending] if e > epoch), default=0)
    if newer:
        raise CheckpointFencedError(
            f"cannot fence {directory} for epoch {epoch}: a fence of epoch {newer} is "
            f"there already (this driver lost the lease)", epoch, newer)
    if epoch in final:
        path = child(directory, final[epoch])
        Fence.decode(read_bytes(path), str(path))
        return path
    write_file(directory, fence_name(epoch, pending=True), b"")  # step 1
    listed: dict[str, int] = {}
    for entry in checkpoint_entries(directory):  # step 2
        if entry.epoch >= epoch:
            continue
        try:
            listed[entry.name] = read_identity(entry.path)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
    fence = Fence(epoch, int(time.time() * 1000), listed)
    path = write_file(directory, fence_name(epoch), fence.encode())  # step 3
    remove(child(directory, fence_name(epoch, pending=True)))
    log.info("checkpoint directory %s fenced for epoch %d (%d older checkpoints listed)",
             directory, epoch, len(listed))
    return path


def refuse_if_fenced(directory: str | Path, epoch: int, time_ms: int,
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


def collect_fences(directory: str | Path) -> None:
    """Delete the fences no reader needs any more.

    The highest finished fence always stays (writers check against it). A lower
    fence of epoch ``y`` is deleted once no checkpoint of an epoch below ``y`` is
    left: fences are listed first, checkpoints after, so a checkpoint of an older
    epoch that a fenced writer publishes after that listing was published after the
    highest fence too, which does not list it and keeps rejecting it. A pending
    marker is deleted once a finished fence of its epoch or a newer one exists; a
    newer pending one is a takeover in progress and stays.
    """
    final, pending = fence_names(directory)
    if not final:
        return
    top = max(final)
    oldest = min((e.epoch for e in checkpoint_entries(directory)), default=None)
    for epoch, name in final.items():
        if epoch < top and (oldest is None or oldest >= epoch):
            remove(child(directory, name))
    for epoch, name in pending.items():
        if epoch <= top:
            remove(child(directory, name))
