"""ReceivedBlockInfo: what a receiver reports about one stored block.

Its Avro schema, shared by the AddBlock message and the driver's events, is
:data:`walstream.rpc.schemas.BLOCK_INFO_SCHEMA`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from receiver.block import SourceRange
from wal.handle import RecordHandle


@dataclass(frozen=True, order=True)
class ReceivedBlockInfo:
    """A block that is durable in a receiver's WAL (Spark's ReceivedBlockInfo)."""

    stream_id: int
    block_id: str
    num_records: int
    handle: RecordHandle
    source: tuple[SourceRange, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "block_id": self.block_id,
            "num_records": self.num_records,
            "handle": self.handle.to_dict(),
            "source": [s.to_dict() for s in self.source],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReceivedBlockInfo:
        return cls(
            int(d["stream_id"]),
            str(d["block_id"]),
            int(d["num_records"]),
            RecordHandle.from_dict(d["handle"]),
            tuple(SourceRange.from_dict(s) for s in d.get("source", [])),
        )
