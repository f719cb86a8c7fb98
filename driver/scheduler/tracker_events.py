"""The tracker's event types, frozen, and their versioned Avro encoding.

Every change of :class:`~walstream.driver.scheduler.received_block_tracker.ReceivedBlockTracker`
state is one of these, logged to the driver WAL before memory changes; replay
applies them in one place (``ReceivedBlockTracker._apply``).

Every event carries its writer's ``epoch``: the lease epoch of the driver that
logged it (docs/decisions/ha-lease-and-fencing.md), 0 for a driver without high
availability. :class:`EpochStarted` is the cut a new leader logs at takeover;
the tracker voids every later event of an older epoch.

Two schema versions are read. Version 1 has no epoch and no ``EPOCH_STARTED``
kind: its events decode as epoch 0. Version 2 adds both. :func:`encode_event`
writes an event in the lowest version that holds it, so a driver without high
availability (every event of epoch 0) writes exactly the version-1 bytes it
always wrote, and a driver of an older release can still replay its WAL; only
an epoch above 0 or an :class:`EpochStarted` needs version 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.errors import CorruptDataError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.rpc.schemas import BLOCK_INFO_SCHEMA
from walstream.wal.framing import DEFAULT_MAX_RECORD_BYTES

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


def _event_schema(version: int, kinds: list[str], epoch: bool) -> dict[str, Any]:
    # The kind stays the first field in every version: event_kind_of reads it
    # from the byte after the header without decoding the rest.
    fields: list[dict[str, Any]] = [
        {"name": "kind", "type": {"type": "enum", "name": "EventKind", "symbols": kinds}},
    ]
    if epoch:
        fields.append({"name": "epoch", "type": "long", "default": 0})
    fields += [
        {"name": "block", "type": ["null", BLOCK_INFO_SCHEMA], "default": None},
        {"name": "batch_time_ms", "type": "long", "default": -1},
        {"name": "allocated", "type": {"type": "array", "items": _STREAM_BLOCKS}, "default": []},
        {"name": "cleanup_times_ms", "type": {"type": "array", "items": "long"}, "default": []},
        # With a cleanup: every stream's acknowledged source positions, so they
        # survive the WAL cleaning that drops the BlockAdditions they came from.
        {"name": "positions", "type": {"type": "array", "items": _STREAM_POSITIONS},
         "default": []},
    ]
    return {"type": "record", "name": "TrackerEvent",
            "namespace": f"walstream.driver.v{version}", "fields": fields}


_KINDS_V1 = ["BLOCK_ADDITION", "BATCH_ALLOCATION", "BATCH_CLEANUP"]
#: Version 2 appends ``EPOCH_STARTED``: the enum indexes of the version-1 kinds are
#: unchanged, so both versions' kinds are read the same way.
_KINDS_V2 = [*_KINDS_V1, "EPOCH_STARTED"]

EVENT_SCHEMA_V1: dict[str, Any] = _event_schema(1, _KINDS_V1, epoch=False)
EVENT_SCHEMA_V2: dict[str, Any] = _event_schema(2, _KINDS_V2, epoch=True)

#: The largest event decoded: an event is one WAL record (within a batched group),
#: never above the WAL's default ``max_record_bytes``.
MAX_EVENT_BYTES = DEFAULT_MAX_RECORD_BYTES
EVENT_CODEC = VersionedCodec("tracker event", b"WSEV",
                             {1: EVENT_SCHEMA_V1, 2: EVENT_SCHEMA_V2},
                             max_bytes=MAX_EVENT_BYTES)

AllocatedBlocks = dict[int, tuple[ReceivedBlockInfo, ...]]


@dataclass(frozen=True)
class BlockAddition:
    block: ReceivedBlockInfo
    epoch: int = 0


@dataclass(frozen=True)
class BatchAllocation:
    batch_time_ms: int
    blocks: tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]
    epoch: int = 0

    def as_map(self) -> AllocatedBlocks:
        return dict(self.blocks)


@dataclass(frozen=True)
class BatchCleanup:
    batch_times_ms: tuple[int, ...]
    positions: tuple[tuple[int, tuple[SourceRange, ...]], ...] = ()
    epoch: int = 0


@dataclass(frozen=True)
class EpochStarted:
    """The cut of a takeover: the leader of ``epoch`` (at least 1) logs it before
    anything else it logs as leader. Its writer's epoch is ``epoch`` itself."""

    epoch: int


TrackerEvent = BlockAddition | BatchAllocation | BatchCleanup | EpochStarted


def encode_event(event: TrackerEvent, version: int | None = None) -> bytes:
    """The event's bytes, in ``version`` or (None) the lowest version that holds it:
    1 for an event of epoch 0 other than :class:`EpochStarted`, else 2.

    Raises :class:`CorruptDataError` for an event no version can hold (a negative
    epoch, an :class:`EpochStarted` below 1, an epoch or a cut in version 1): it
    would not decode, so it is never written.
    """
    if event.epoch < 0 or (isinstance(event, EpochStarted) and event.epoch < 1):
        raise CorruptDataError(f"tracker event: {event!r} has no valid epoch")
    if version is None:
        version = 1 if event.epoch == 0 and not isinstance(event, EpochStarted) else 2
    elif version == 1 and (event.epoch != 0 or isinstance(event, EpochStarted)):
        raise CorruptDataError(f"tracker event: version 1 cannot hold {event!r}")
    datum: dict[str, Any] = {"block": None, "batch_time_ms": -1, "allocated": [],
                             "cleanup_times_ms": [], "positions": []}
    if version >= 2:
        datum["epoch"] = event.epoch
    if isinstance(event, BlockAddition):
        datum.update(kind="BLOCK_ADDITION", block=event.block.to_dict())
    elif isinstance(event, BatchAllocation):
        datum.update(
            kind="BATCH_ALLOCATION",
            batch_time_ms=event.batch_time_ms,
            allocated=[{"stream_id": s, "blocks": [b.to_dict() for b in blocks]}
                       for s, blocks in event.blocks],
        )
    elif isinstance(event, BatchCleanup):
        datum.update(
            kind="BATCH_CLEANUP",
            cleanup_times_ms=list(event.batch_times_ms),
            positions=[{"stream_id": s, "ranges": [r.to_dict() for r in ranges]}
                       for s, ranges in event.positions],
        )
    else:
        datum.update(kind="EPOCH_STARTED")
    return EVENT_CODEC.encode(datum, version)


_KINDS_BY_VERSION = {1: _KINDS_V1, 2: _KINDS_V2}


def event_kind_of(data: bytes) -> str | None:
    """The kind of an encoded event (``BLOCK_ADDITION``, ``BATCH_ALLOCATION``,
    ``BATCH_CLEANUP``, and in version 2 ``EPOCH_STARTED``) without decoding it, or
    None for bytes that are no event of a known version. In every version the kind
    is the record's first field, an Avro enum: its index is the byte after the
    header."""
    try:
        kinds = _KINDS_BY_VERSION.get(EVENT_CODEC.peek_version(data))
    except CorruptDataError:
        return None
    n = len(EVENT_CODEC.magic) + 1
    if kinds is None or len(data) <= n or data[n] % 2 or data[n] // 2 >= len(kinds):
        return None
    return kinds[data[n] // 2]


def decode_event(data: bytes) -> TrackerEvent:
    """Decode one event; raises CorruptDataError / UnknownSchemaVersionError.

    Never another exception type, for any input (see ``VersionedCodec.decode``;
    the schema fixes every field's type, and handles are validated); input
    above MAX_EVENT_BYTES is refused before decoding. A version-1 event has
    epoch 0; a negative epoch, or an ``EPOCH_STARTED`` below 1, is corrupt.
    """
    version, d = EVENT_CODEC.decode(data)
    epoch = int(d["epoch"]) if version >= 2 else 0
    if epoch < 0:
        raise CorruptDataError(f"tracker event: negative epoch {epoch}")
    kind = d["kind"]
    if kind == "EPOCH_STARTED":
        if epoch < 1:
            raise CorruptDataError(f"tracker event: EpochStarted of epoch {epoch} (below 1)")
        return EpochStarted(epoch)
    if kind == "BLOCK_ADDITION":
        if d["block"] is None:  # the schema allows it; a BlockAddition never has none
            raise CorruptDataError("tracker event: a BlockAddition without its block")
        return BlockAddition(ReceivedBlockInfo.from_dict(d["block"]), epoch)
    if kind == "BATCH_ALLOCATION":
        return BatchAllocation(
            int(d["batch_time_ms"]),
            tuple((int(sb["stream_id"]), tuple(ReceivedBlockInfo.from_dict(b)
                                               for b in sb["blocks"]))
                  for sb in d["allocated"]),
            epoch,
        )
    return BatchCleanup(
        tuple(int(t) for t in d["cleanup_times_ms"]),
        tuple((int(p["stream_id"]), tuple(SourceRange.from_dict(r) for r in p["ranges"]))
              for p in d.get("positions", [])),
        epoch,
    )
