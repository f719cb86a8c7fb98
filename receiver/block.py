"""A block: the unit a receiver stores in its WAL and reports to the driver.

Stored as a versioned Avro envelope (never pickle) holding the stream id, the
block id, the records (bytes) and the source ranges they came from, so a PySpark
task can decode a block with no user code and a Kafka receiver can resume from
the exact source positions the driver acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wal.framing import DEFAULT_MAX_RECORD_BYTES
from walstream.avro_codec import AVRO_LENGTHS, VersionedCodec, avro_long
from walstream.rpc.schemas import SOURCE_RANGE_SCHEMA

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

#: The largest block decoded: a block is one WAL record, never above the WAL's
#: default ``max_record_bytes`` (pass the writer's to ``Block.decode`` if raised).
MAX_BLOCK_BYTES = DEFAULT_MAX_RECORD_BYTES
BLOCK_CODEC = VersionedCodec("block", b"WSBK", {1: BLOCK_SCHEMA_V1}, max_bytes=MAX_BLOCK_BYTES)
_BLOCK_PREFIX_V1 = BLOCK_CODEC.magic + bytes((1,))


def _avro_bytes_array(items: list[bytes]) -> list[bytes]:
    """Parts of Avro's binary array of ``bytes``: one block of ``len(items)``, then 0."""
    if not items:
        return [b"\x00"]
    # The usual record's length prefix is looked up, not computed.
    fits = max(map(len, items)) < len(AVRO_LENGTHS)
    prefix = AVRO_LENGTHS.__getitem__ if fits else avro_long
    parts = [avro_long(len(items))]
    parts += [p for item in items for p in (prefix(len(item)), item)]
    parts.append(b"\x00")
    return parts


def _avro_string(s: str) -> bytes:
    data = s.encode("utf-8")
    return avro_long(len(data)) + data


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
        """``BLOCK_CODEC.encode`` of the v1 record, laid out by hand.

        Byte-identical to fastavro's encoding (tests/receiver/test_block.py checks
        it), but one join of the records instead of fastavro growing a buffer
        record by record, on the receiver's pushing thread
        (docs/decisions/hand-laid-avro-encoders.md). A record that
        is not bytes fails the join with ``TypeError``, as it failed fastavro.
        """
        parts = [_BLOCK_PREFIX_V1, avro_long(self.stream_id), _avro_string(self.block_id)]
        parts += _avro_bytes_array(self.records)
        if self.source:
            parts.append(avro_long(len(self.source)))
            for r in self.source:
                parts += (_avro_string(r.topic), avro_long(r.partition),
                          avro_long(r.from_offset), avro_long(r.until_offset))
        parts.append(b"\x00")
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes, max_bytes: int = MAX_BLOCK_BYTES) -> Block:
        """Decode a stored block; any other input raises ``CorruptDataError`` (or
        ``UnknownSchemaVersionError``), never another exception type. Input
        above ``max_bytes`` is refused before decoding."""
        _, d = BLOCK_CODEC.decode(data, max_bytes)
        return cls(
            d["stream_id"],
            d["block_id"],
            list(d["records"]),
            tuple(SourceRange.from_dict(s) for s in d["source"]),
        )
