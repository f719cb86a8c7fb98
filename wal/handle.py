"""RecordHandle: where a WAL record lives, as a small frozen comparable value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walstream.errors import CorruptDataError

#: Avro schema of a handle, for embedding in driver events and block reports.
HANDLE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "RecordHandle",
    "namespace": "walstream.wal",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "chunks", "type": "int", "default": 1},
        {"name": "index", "type": "int", "default": -1},
    ],
}


@dataclass(frozen=True, order=True)
class RecordHandle:
    """A WAL record's address: ``chunks`` consecutive Kafka records from ``offset``.

    ``index`` is -1 for a plain record; for a record written through
    :class:`~wal.BatchedWriteAheadLog` it is the record's position inside the
    group stored at ``offset``.
    """

    topic: str
    partition: int
    offset: int
    chunks: int = 1
    index: int = -1

    def __post_init__(self) -> None:
        if not self.topic or self.partition < 0 or self.offset < 0 or self.chunks < 1:
            raise CorruptDataError(f"invalid record handle {self!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "chunks": self.chunks,
            "index": self.index,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecordHandle:
        try:
            return cls(
                str(d["topic"]),
                int(d["partition"]),
                int(d["offset"]),
                int(d.get("chunks", 1)),
                int(d.get("index", -1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"not a record handle: {d!r}") from exc

    def group(self) -> RecordHandle:
        """The handle of the stored Kafka record(s), without the batch index."""
        return RecordHandle(self.topic, self.partition, self.offset, self.chunks)
