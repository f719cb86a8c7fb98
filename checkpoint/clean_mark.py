"""The clean mark: which checkpoint's cleanup may have deleted WAL data.

"Checkpoint before clean" makes the newest checkpoint safe to restore; it does not
make an *older* one safe. After checkpoint ``t`` is durable the driver cleans the
WALs below a threshold computed from ``t`` (its pending batches and state), so a
restart from a checkpoint older than ``t`` could ask for blocks that are gone. The
driver therefore publishes ``clean-mark`` (``t``) right before that cleanup, and
the reader refuses to fall back, past an unreadable newest checkpoint, to one older
than the mark: it fails with a clear error instead of restoring a checkpoint whose
data the WALs no longer hold.

This module holds the format; ``walstream.checkpoint.files`` does the I/O.
"""

from __future__ import annotations

import zlib
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.checkpoint.errors import CorruptCheckpointError
from walstream.errors import CorruptDataError

CLEAN_MARK_NAME = "clean-mark"
CLEAN_MARK_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "CleanMark",
    "namespace": "walstream.checkpoint.clean_mark.v1",
    "fields": [
        {"name": "checkpoint_time_ms", "type": "long"},
        {"name": "written_wall_ms", "type": "long"},
    ],
}
CLEAN_MARK_CODEC = VersionedCodec("checkpoint clean mark", b"WSCM", {1: CLEAN_MARK_SCHEMA_V1},
                                  max_bytes=4096)


def encode_mark(checkpoint_time_ms: int, written_wall_ms: int) -> bytes:
    body = CLEAN_MARK_CODEC.encode({"checkpoint_time_ms": checkpoint_time_ms,
                                    "written_wall_ms": written_wall_ms})
    return body + zlib.crc32(body).to_bytes(4, "big")


def decode_mark(raw: bytes, where: str) -> int:
    """The checkpoint time a mark holds; :class:`CorruptCheckpointError` if damaged."""
    body, trailer = raw[:-4], raw[-4:]
    if len(raw) < 5 or zlib.crc32(body).to_bytes(4, "big") != trailer:
        raise CorruptCheckpointError(f"clean mark {where}: checksum mismatch or truncated")
    try:
        _version, record = CLEAN_MARK_CODEC.decode(body)
    except CorruptDataError as exc:
        raise CorruptCheckpointError(f"clean mark {where}: {exc}") from exc
    return int(record["checkpoint_time_ms"])
