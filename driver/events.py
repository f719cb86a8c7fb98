"""The tracker's three event types, frozen, and their versioned Avro encoding.

Every change of :class:`~driver.received_block_tracker.ReceivedBlockTracker`
state is one of these, logged to the driver WAL before memory changes; replay
applies them in one place (``ReceivedBlockTracker._apply``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receiver.block import SourceRange
from receiver.block_info import ReceivedBlockInfo
from wal.framing import DEFAULT_MAX_RECORD_BYTES
from walstream.avro_codec import VersionedCodec
from walstream.errors import CorruptDataError
from walstream.rpc.schemas import BLOCK_INFO_SCHEMA

_STREAM_BLOCKS = {
    "type": "record",
    "name": "StreamBlocks",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "blocks",
         "type": {"type": "array", "items": "walstream.driver.ReceivedBlockInfo"}},
    ],
}

_STREAM_POSITIONS = {
    "type": "record",
    "name": "StreamPositions",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "ranges", "type": {"type": "array", "items": "walstream.receiver.SourceRange"}},
    ],
}

EVENT_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "TrackerEvent",
    "namespace": "walstream.driver.v1",
    "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "EventKind",
                                  "symbols": ["BLOCK_ADDITION", "BATCH_ALLOCATION",
                                              "BATCH_CLEANUP"]}},
        {"name": "block", "type": ["null", BLOCK_INFO_SCHEMA], "default": None},
        {"name": "batch_time_ms", "type": "long", "default": -1},
        {"name": "allocated", "type": {"type": "array", "items": _STREAM_BLOCKS}, "default": []},
        {"name": "cleanup_times_ms", "type": {"type": "array", "items": "long"}, "default": []},
        # With a cleanup: every stream's acknowledged source positions, so they
        # survive the WAL cleaning that drops the BlockAdditions they came from.
        {"name": "positions", "type": {"type": "array", "items": _STREAM_POSITIONS},
         "default": []},
    ],
}

#: The largest event decoded: an event is one WAL record (within a batched group),
#: never above the WAL's default ``max_record_bytes``.
MAX_EVENT_BYTES = DEFAULT_MAX_RECORD_BYTES
EVENT_CODEC = VersionedCodec("tracker event", b"WSEV", {1: EVENT_SCHEMA_V1},
                             max_bytes=MAX_EVENT_BYTES)

AllocatedBlocks = dict[int, tuple[ReceivedBlockInfo, ...]]


@dataclass(frozen=True)
class BlockAddition:
    block: ReceivedBlockInfo


@dataclass(frozen=True)
class BatchAllocation:
    batch_time_ms: int
    blocks: tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]

    def as_map(self) -> AllocatedBlocks:
        return dict(self.blocks)


@dataclass(frozen=True)
class BatchCleanup:
    batch_times_ms: tuple[int, ...]
    positions: tuple[tuple[int, tuple[SourceRange, ...]], ...] = ()


TrackerEvent = BlockAddition | BatchAllocation | BatchCleanup


def encode_event(event: TrackerEvent) -> bytes:
    datum: dict[str, Any] = {"block": None, "batch_time_ms": -1, "allocated": [],
                             "cleanup_times_ms": []}
    if isinstance(event, BlockAddition):
        datum.update(kind="BLOCK_ADDITION", block=event.block.to_dict())
    elif isinstance(event, BatchAllocation):
        datum.update(
            kind="BATCH_ALLOCATION",
            batch_time_ms=event.batch_time_ms,
            allocated=[{"stream_id": s, "blocks": [b.to_dict() for b in blocks]}
                       for s, blocks in event.blocks],
        )
    else:
        datum.update(
            kind="BATCH_CLEANUP",
            cleanup_times_ms=list(event.batch_times_ms),
            positions=[{"stream_id": s, "ranges": [r.to_dict() for r in ranges]}
                       for s, ranges in event.positions],
        )
    return EVENT_CODEC.encode(datum)


_KINDS = EVENT_SCHEMA_V1["fields"][0]["type"]["symbols"]


def event_kind_of(data: bytes) -> str | None:
    """The kind of an encoded event (``BLOCK_ADDITION``, ...) without decoding it,
    or None for bytes that are no version-1 event. In version 1 the kind is the
    record's first field, an Avro enum: its index is the byte after the header."""
    try:
        if EVENT_CODEC.peek_version(data) != 1:
            return None
    except CorruptDataError:
        return None
    n = len(EVENT_CODEC.magic) + 1
    if len(data) <= n or data[n] % 2 or data[n] // 2 >= len(_KINDS):
        return None
    return str(_KINDS[data[n] // 2])

def decode_event(data: bytes) -> TrackerEvent:
    """Decode one event; raises CorruptDataError / UnknownSchemaVersionError.

    Never another exception type, for any input (see ``VersionedCodec.decode``;
    the schema fixes every field's type, and handles are validated); input
    above MAX_EVENT_BYTES is refused before decoding.
    """
    _, d = EVENT_CODEC.decode(data)
    kind = d["kind"]
    if kind == "BLOCK_ADDITION":
        if d["block"] is None:  # the schema allows it; a BlockAddition never has none
            raise CorruptDataError("tracker event: a BlockAddition without its block")
        return BlockAddition(ReceivedBlockInfo.from_dict(d["block"]))
    if kind == "BATCH_ALLOCATION":
        return BatchAllocation(
            int(d["batch_time_ms"]),
            tuple((int(sb["stream_id"]), tuple(ReceivedBlockInfo.from_dict(b)
                                               for b in sb["blocks"]))
                  for sb in d["allocated"]),
        )
    return BatchCleanup(
        tuple(int(t) for t in d["cleanup_times_ms"]),
        tuple((int(p["stream_id"]), tuple(SourceRange.from_dict(r) for r in p["ranges"]))
              for p in d.get("positions", [])),
    )
