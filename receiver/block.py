"""A block: the unit a receiver stores in its WAL and reports to the driver.

Stored as a versioned Avro envelope (never pickle) holding the stream id, the
block id, the records (bytes) and the source ranges they came from, so a PySpark
task can decode a block with no user code and a Kafka receiver can resume from
the exact source positions the driver acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from walstream.avro_codec import VersionedCodec

SOURCE_RANGE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SourceRange",
    "namespace": "walstream.receiver",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "from_offset", "type": "long"},
        {"name": "until_offset", "type": "long"},
    ],
}

BLOCK_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "Block",
    "namespace": "walstream.receiver.v1",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "block_id", "type": "string"},
        {"name": "records", "type": {"type": "array", "items": "bytes"}},
        {"name": "source", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
    ],
}

BLOCK_CODEC = VersionedCodec("block", b"WSBK", {1: BLOCK_SCHEMA_V1})


@dataclass(frozen=True, order=True)
class SourceRange:
    """Offsets ``[from_offset, until_offset)`` of one source topic partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from_offset": self.from_offset,
            "until_offset": self.until_offset,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceRange:
        return cls(d["topic"], int(d["partition"]), int(d["from_offset"]), int(d["until_offset"]))


@dataclass(frozen=True)
class Block:
    stream_id: int
    block_id: str
    records: list[bytes]
    source: tuple[SourceRange, ...] = field(default=())

    def encode(self) -> bytes:
        return BLOCK_CODEC.encode(
            {
                "stream_id": self.stream_id,
                "block_id": self.block_id,
                "records": self.records,
                "source": [s.to_dict() for s in self.source],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Block:
        _, d = BLOCK_CODEC.decode(data)
        return cls(
            d["stream_id"],
            d["block_id"],
            list(d["records"]),
            tuple(SourceRange.from_dict(s) for s in d["source"]),
        )
