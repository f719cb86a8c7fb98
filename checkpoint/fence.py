"""Checkpoint fences: the cut a new leader draws in the checkpoint directory.

A driver that takes the lease with epoch ``e`` writes ``fence-e<e>`` before it reads
any checkpoint (docs/decisions/ha-lease-and-fencing.md, "The fencing cut"). The
fence lists every checkpoint of an older epoch present at that moment, each with
its identity (the CRC32 trailer of the file's bytes, so a later rewrite of the same
name under different content is not taken for the listed file).

The reading rule: a checkpoint of epoch ``x`` is eligible only if every fence of an
epoch ``y > x`` lists it with its current identity. Checkpoints of an epoch at or
above every fence's are eligible. What a fenced driver publishes after the fence
was written is therefore never listed by it and never read, whatever the timing;
what it published before is listed and read, so nothing written before the cut is
lost. A fence of epoch ``y`` judges only checkpoints of epochs below ``y``.

A corrupt fence is an error (:class:`CorruptFenceError`) as soon as a decision
depends on it, that is, when no readable fence rejects a candidate already: see
the error for why it is not skipped.

This module holds the format and the rule; ``walstream.checkpoint.files`` does the I/O.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.checkpoint.errors import CorruptFenceError
from walstream.errors import CorruptDataError

FENCE_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "CheckpointFence",
    "namespace": "walstream.checkpoint.fence.v1",
    "fields": [
        {"name": "epoch", "type": "long"},
        {"name": "written_wall_ms", "type": "long"},
        {"name": "listed", "type": {"type": "array", "items": {
            "type": "record", "name": "Listed", "fields": [
                {"name": "name", "type": "string"},
                {"name": "identity", "type": "long"}]}}},
    ],
}
#: The largest fence file decoded: a fence lists file names only, a few per
#: retained checkpoint, so this refuses foreign files before decoding.
MAX_FENCE_BYTES = 16 * 1024 * 1024
FENCE_CODEC = VersionedCodec("checkpoint fence", b"WSCF", {1: FENCE_SCHEMA_V1},
                             max_bytes=MAX_FENCE_BYTES)


def identity(raw: bytes | bytearray | memoryview) -> int:
    """The identity a fence records for a checkpoint file's bytes ``raw``: its CRC32
    trailer (the checksum of the whole body), -1 for a file too short to have one."""
    if len(raw) < 4:
        return -1
    return int.from_bytes(bytes(raw[-4:]), "big")


@dataclass(frozen=True)
class Fence:
    """Fence of ``epoch``: checkpoint name -> identity of every older-epoch checkpoint
    present when it was written."""

    epoch: int
    written_wall_ms: int
    listed: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = FENCE_CODEC.encode({
            "epoch": self.epoch,
            "written_wall_ms": self.written_wall_ms,
            "listed": [{"name": n, "identity": i} for n, i in sorted(self.listed.items())],
        })
        return body + zlib.crc32(body).to_bytes(4, "big")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, where: str) -> Fence:
        """Decode a fence file's bytes; :class:`CorruptFenceError` naming ``where``
        for anything but a whole fence of a known version."""
        data = bytes(data)
        if len(data) < 8:
            raise CorruptFenceError(f"fence {where}: {len(data)} bytes, too short", where)
        if len(data) > MAX_FENCE_BYTES:
            raise CorruptFenceError(f"fence {where}: {len(data)} bytes (max "
                                    f"{MAX_FENCE_BYTES}), not a fence", where)
        body, crc = data[:-4], int.from_bytes(data[-4:], "big")
        if zlib.crc32(body) != crc:
            raise CorruptFenceError(f"fence {where}: CRC mismatch (truncated or corrupt)",
                                    where)
        try:
            _, d = FENCE_CODEC.decode(body)
        except CorruptDataError as exc:
            raise CorruptFenceError(f"fence {where}: {exc}", where) from exc
        if d["epoch"] < 1:
            raise CorruptFenceError(f"fence {where}: epoch {d['epoch']} is below 1", where)
        return cls(d["epoch"], d["written_wall_ms"],
                   {e["name"]: e["identity"] for e in d["listed"]})


@dataclass(frozen=True)
class Rejection:
    """Why a checkpoint is not eligible: the fence of ``fence_epoch`` at ``fence``
    does not list it (``rewritten``: lists its name with another identity)."""

    fence_epoch: int
    fence: str
    rewritten: bool

    def describe(self, checkpoint: str) -> str:
        how = ("lists it with other content (rewritten after the fence)" if self.rewritten
               else "does not list it (written after the fence)")
        return (f"checkpoint {checkpoint} is fenced off: fence {self.fence} of epoch "
                f"{self.fence_epoch} {how}; a newer leader has taken over")


class FenceSet:
    """The fences of one directory, read once: ``epoch -> (where, fence or the error
    its bytes gave)``. Judges checkpoints by the reading rule above."""

    def __init__(self, fences: Mapping[int, tuple[str, Fence | CorruptFenceError]]
                 | None = None) -> None:
        self._fences = dict(fences or {})

    def __bool__(self) -> bool:
        return bool(self._fences)

    @property
    def highest(self) -> int:
        """The highest fence epoch, 0 without fences."""
        return max(self._fences, default=0)

    def judges(self, epoch: int) -> bool:
        """Whether a fence can reject a checkpoint of ``epoch`` (one of a newer epoch
        exists); when not, the checkpoint is eligible without reading it."""
        return self.highest > epoch

    def rejection(self, name: str, epoch: int, ident: int) -> Rejection | None:
        """None when the checkpoint ``name`` of ``epoch`` with identity ``ident`` is
        eligible, else the first fence (newest first) that rejects it.

        Raises :class:`CorruptFenceError` when no readable fence rejects it and a
        corrupt fence of a newer epoch would have to decide.
        """
        corrupt: CorruptFenceError | None = None
        for fence_epoch in sorted(self._fences, reverse=True):
            if fence_epoch <= epoch:
                break
            where, fence = self._fences[fence_epoch]
            if isinstance(fence, CorruptFenceError):
                corrupt = corrupt or fence
                continue
            listed = fence.listed.get(name)
            if listed != ident:
                return Rejection(fence_epoch, where, rewritten=listed is not None)
        if corrupt is not None:
            raise CorruptFenceError(
                f"{corrupt}; cannot tell whether checkpoint {name} of epoch {epoch} was "
                f"written before the takeover, so it is not read", corrupt.path)
        return None
