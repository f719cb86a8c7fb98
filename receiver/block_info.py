"""ReceivedBlockInfo: what a receiver reports about one stored block; BlockFigures:
its figures, sent along for the driver's metrics.

Its Avro schema, shared by the AddBlock message and the driver's events, is
:data:`walstream.rpc.schemas.BLOCK_INFO_SCHEMA`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from walstream.receiver.block import SourceRange
from walstream.wal.handle import RecordHandle


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


@dataclass(frozen=True, order=True)
class SourceEnd:
    """The end (next offset to be written) of one source topic partition, as a
    receiver last learnt it from its source."""

    topic: str
    partition: int
    end_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "end_offset": self.end_offset}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceEnd:
        return cls(str(d["topic"]), int(d["partition"]), int(d["end_offset"]))


@dataclass(frozen=True)
class BlockFigures:
    """A receiver's figures since its last report, sent with a block's AddBlock
    for the driver's metrics (schema: :data:`walstream.rpc.schemas.BLOCK_FIGURES_SCHEMA`):
    the block's WAL write (seconds until acknowledged, bytes) and the source ends it
    learnt since its last report. Never logged nor stored."""

    wal_write_seconds: float
    wal_bytes: int
    source_ends: tuple[SourceEnd, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"wal_write_seconds": self.wal_write_seconds, "wal_bytes": self.wal_bytes,
                "source_ends": [e.to_dict() for e in self.source_ends]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlockFigures:
        return cls(float(d["wal_write_seconds"]), int(d["wal_bytes"]),
                   tuple(SourceEnd.from_dict(e) for e in d.get("source_ends", [])))
