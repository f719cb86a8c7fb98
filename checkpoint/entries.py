"""The checkpoints a directory holds, as their names tell them: ``checkpoint-<ms>``,
or ``checkpoint-<ms>-e<epoch>`` for a writer of lease epoch ``epoch`` above 0.
Names carry the batch time, and readers pick the newest *time*, so a late write of
an older batch never hides a newer one (SPARK-11267 / SPARK-11740)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from walstream.checkpoint.storage import child, list_names

_NAME = re.compile(r"^checkpoint-(\d{13})(?:-e([1-9]\d{0,18}))?$")


def checkpoint_name(time_ms: int, epoch: int = 0) -> str:
    """``checkpoint-<ms>`` for epoch 0 (the name every release wrote), else
    ``checkpoint-<ms>-e<epoch>``: drivers of different epochs never write the same
    name, so a fenced driver's late write can never replace a newer leader's file."""
    name = f"checkpoint-{time_ms:013d}"
    return f"{name}-e{epoch}" if epoch else name


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
    found = [CheckpointEntry(int(m.group(1)), int(m.group(2) or 0), n, child(directory, n))
             for n in list_names(directory) if (m := _NAME.match(n))]
    return sorted(found, key=lambda e: (e.time_ms, e.epoch), reverse=True)


def checkpoint_files(directory: str | Path) -> list[tuple[int, Any]]:
    """``(time_ms, path)`` of every checkpoint file, newest first; foreign files ignored.
    Paths are :class:`~pathlib.Path` for a local directory, URLs for an fsspec one.
    Fences are not applied: :func:`read_latest` is what picks the checkpoint to use."""
    return [(e.time_ms, e.path) for e in checkpoint_entries(directory)]
