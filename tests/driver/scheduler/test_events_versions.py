"""Tracker event schema versions: version 1 (no epoch) still decodes, as epoch 0;
version 2 carries the writer's epoch and the EpochStarted cut."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from walstream.driver.scheduler.tracker_events import (
    EVENT_CODEC,
    EVENT_SCHEMA_V1,
    BatchAllocation,
    BatchCleanup,
    BlockAddition,
    EpochStarted,
    TrackerEvent,
    decode_event,
    encode_event,
    event_kind_of,
)
from walstream.errors import CorruptDataError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.handle import RecordHandle

INFO = ReceivedBlockInfo(1, "input-1-a", 5, RecordHandle("wal-t", 0, 7, 2),
                         (SourceRange("src", 0, 0, 5),))
RANGES = ((1, (SourceRange("src", 0, 0, 5),)),)

# Bytes the release before epochs wrote for these three events (BlockAddition(INFO),
# BatchAllocation(2000, ((1, (INFO,)),)), BatchCleanup((2000,), RANGES)): what
# users' WALs hold.
STORED_V1 = {
    "addition": bytes.fromhex(
        "575345560100020212696e7075742d312d610a0a77616c2d74000e0401020673726300000a0001000000"),
    "allocation": bytes.fromhex(
        "57534556010200a01f0202020212696e7075742d312d610a0a77616c2d74000e0401020673726300000a"
        "0000000000"),
    "cleanup": bytes.fromhex("57534556010400010002a01f000202020673726300000a0000"),
}
EXPECTED_V1: dict[str, TrackerEvent] = {
    "addition": BlockAddition(INFO),
    "allocation": BatchAllocation(2000, ((1, (INFO,)),)),
    "cleanup": BatchCleanup((2000,), RANGES),
}


def v1_bytes(datum: dict[str, Any]) -> bytes:
    """A version-1 event written with the version-1 schema directly, not encode_event."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(EVENT_SCHEMA_V1), datum)
    return EVENT_CODEC.magic + b"\x01" + buf.getvalue()


@pytest.mark.parametrize("name", sorted(STORED_V1))
def test_stored_version_1_events_decode_as_epoch_0(name: str) -> None:
    event = decode_event(STORED_V1[name])
    assert event == EXPECTED_V1[name]
    assert event.epoch == 0


@pytest.mark.parametrize("name", sorted(STORED_V1))
def test_an_event_of_epoch_0_is_still_written_as_version_1(name: str) -> None:
    # A driver without high availability writes what it always wrote, so a
    # driver of the release before can still replay its WAL.
    assert encode_event(EXPECTED_V1[name]) == STORED_V1[name]


def test_events_written_with_the_v1_schema_directly_decode() -> None:
    empty: dict[str, Any] = {"block": None, "batch_time_ms": -1, "allocated": [],
                             "cleanup_times_ms": [], "positions": []}
    addition = v1_bytes({**empty, "kind": "BLOCK_ADDITION", "block": INFO.to_dict()})
    allocation = v1_bytes({**empty, "kind": "BATCH_ALLOCATION", "batch_time_ms": 3000,
                           "allocated": [{"stream_id": 1, "blocks": [INFO.to_dict()]}]})
    cleanup = v1_bytes({**empty, "kind": "BATCH_CLEANUP", "cleanup_times_ms": [3000]})
    assert decode_event(addition) == BlockAddition(INFO, 0)
    assert decode_event(allocation) == BatchAllocation(3000, ((1, (INFO,)),), 0)
    assert decode_event(cleanup) == BatchCleanup((3000,), (), 0)
    assert [event_kind_of(d) for d in (addition, allocation, cleanup)] == [
        "BLOCK_ADDITION", "BATCH_ALLOCATION", "BATCH_CLEANUP"]


V2_EVENTS: dict[str, TrackerEvent] = {
    "addition": BlockAddition(INFO, 2),
    "allocation": BatchAllocation(2000, ((1, (INFO, INFO)), (2, ())), 2),
    "cleanup": BatchCleanup((1000, 2000), RANGES, 2**40),
    "epoch-started": EpochStarted(2),
}
V2_KINDS = {"addition": "BLOCK_ADDITION", "allocation": "BATCH_ALLOCATION",
            "cleanup": "BATCH_CLEANUP", "epoch-started": "EPOCH_STARTED"}


@pytest.mark.parametrize("name", sorted(V2_EVENTS))
def test_version_2_round_trip_of_each_kind(name: str) -> None:
    event = V2_EVENTS[name]
    data = encode_event(event)
    assert EVENT_CODEC.peek_version(data) == 2
    assert decode_event(data) == event
    assert decode_event(data).epoch == event.epoch
    assert event_kind_of(data) == V2_KINDS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_V1))
def test_an_epoch_0_event_forced_to_version_2_round_trips(name: str) -> None:
    data = encode_event(EXPECTED_V1[name], version=2)
    assert EVENT_CODEC.peek_version(data) == 2
    assert decode_event(data) == EXPECTED_V1[name]


def test_what_version_1_cannot_hold_is_refused_before_writing() -> None:
    with pytest.raises(CorruptDataError, match="version 1"):
        encode_event(BlockAddition(INFO, 1), version=1)
    with pytest.raises(CorruptDataError, match="version 1"):
        encode_event(EpochStarted(1), version=1)
    with pytest.raises(CorruptDataError, match="no valid epoch"):
        encode_event(BlockAddition(INFO, -1))
    with pytest.raises(CorruptDataError, match="no valid epoch"):
        encode_event(EpochStarted(0))


def _v2(kind: str, epoch: int) -> bytes:
    return EVENT_CODEC.encode({"kind": kind, "epoch": epoch, "block": None,
                               "batch_time_ms": -1, "allocated": [],
                               "cleanup_times_ms": [], "positions": []}, 2)


def test_a_negative_epoch_or_a_cut_below_1_is_corrupt() -> None:
    with pytest.raises(CorruptDataError, match="negative epoch"):
        decode_event(_v2("BATCH_CLEANUP", -3))
    with pytest.raises(CorruptDataError, match="below 1"):
        decode_event(_v2("EPOCH_STARTED", 0))
    assert decode_event(_v2("EPOCH_STARTED", 5)) == EpochStarted(5)


def test_event_kind_of_refuses_what_is_no_event_of_a_known_version() -> None:
    assert event_kind_of(b"") is None
    assert event_kind_of(EVENT_CODEC.magic + b"\x02") is None
    assert event_kind_of(EVENT_CODEC.magic + b"\x03" + b"\x00") is None  # unknown version
    assert event_kind_of(EVENT_CODEC.magic + b"\x01" + b"\x06") is None  # no 4th kind in v1
    assert event_kind_of(EVENT_CODEC.magic + b"\x02" + b"\x08") is None  # no 5th kind in v2
