"""Fuzz of the tracker event decoder: every input decodes or raises CorruptDataError."""

from __future__ import annotations

import pytest

from tests.walstream.fuzz_checks import (
    FlippedBytes,
    TruncationsRaise,
    decodes_or_typed_error,
    huge_lengths,
)
from walstream.avro_codec import avro_long
from walstream.driver.scheduler.tracker_events import (
    EVENT_CODEC,
    BatchAllocation,
    BatchCleanup,
    BlockAddition,
    EpochStarted,
    decode_event,
    encode_event,
)
from walstream.errors import CorruptDataError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.handle import RecordHandle

INFO = ReceivedBlockInfo(1, "input-1-a", 5, RecordHandle("wal-t", 0, 7, 2),
                         (SourceRange("src", 0, 0, 5),))
VALID = {
    "addition": encode_event(BlockAddition(INFO)),
    "allocation": encode_event(BatchAllocation(2000, ((1, (INFO, INFO)), (2, ())))),
    "cleanup": encode_event(BatchCleanup((1000, 2000), ((1, (SourceRange("src", 0, 0, 5),)),))),
    # Version 2: an epoch above 0, and the cut.
    "addition-v2": encode_event(BlockAddition(INFO, 3)),
    "allocation-v2": encode_event(BatchAllocation(2000, ((1, (INFO, INFO)), (2, ())), 3)),
    "cleanup-v2": encode_event(BatchCleanup((1000,), ((1, (SourceRange("src", 0, 0, 5),)),),
                                            2**40)),
    "epoch-started": encode_event(EpochStarted(7)),
}
PREFIX = EVENT_CODEC.magic + b"\x01"
PREFIX_V2 = EVENT_CODEC.magic + b"\x02"
ADDITION, ALLOCATION, CLEANUP, EPOCH_STARTED = (avro_long(k) for k in range(4))


class TestEventDecoder(TruncationsRaise, FlippedBytes):
    decode = staticmethod(decode_event)
    error = CorruptDataError
    valid = VALID
    prefixes = (*(PREFIX + kind for kind in (b"", ADDITION, ALLOCATION, CLEANUP)),
                *(PREFIX_V2 + kind + avro_long(epoch)
                  for kind in (b"", ADDITION, ALLOCATION, CLEANUP, EPOCH_STARTED)
                  for epoch in (0, 1, -1)))


def test_huge_declared_lengths_and_indexes_raise_without_allocating() -> None:
    no_block = ALLOCATION + b"\x00" + avro_long(2000)
    cases = [
        *huge_lengths(PREFIX),  # the event kind's enum index
        *huge_lengths(PREFIX + ADDITION),  # the block union's branch
        *huge_lengths(PREFIX + ADDITION + b"\x02" + avro_long(1)),  # the block id's length
        *huge_lengths(PREFIX + no_block),  # the allocated streams' count
        *huge_lengths(PREFIX + no_block + avro_long(1) + avro_long(1)),  # a stream's blocks
        *huge_lengths(PREFIX + no_block + b"\x00"),  # the cleanup times' count
        *huge_lengths(PREFIX + no_block + b"\x00\x00"),  # the positions' count
    ]
    v2 = [
        *huge_lengths(PREFIX_V2),  # the event kind's enum index
        *huge_lengths(PREFIX_V2 + ADDITION),  # the epoch (a huge one is a valid long)
        *huge_lengths(PREFIX_V2 + ADDITION + avro_long(1)),  # the block union's branch
        *huge_lengths(PREFIX_V2 + ALLOCATION + avro_long(1) + b"\x00" + avro_long(2000)),
    ]
    for data in cases + v2:
        assert decodes_or_typed_error(decode_event, data) is None


def test_an_invalid_handle_inside_a_valid_encoding_raises_a_typed_error() -> None:
    bad = EVENT_CODEC.encode({
        "kind": "BLOCK_ADDITION",
        "block": {"stream_id": 1, "block_id": "b", "num_records": 1,
                  "handle": {"topic": "", "partition": -1, "offset": -5, "chunks": 0,
                             "index": -1},
                  "source": []},
        "batch_time_ms": -1, "allocated": [], "cleanup_times_ms": [], "positions": []})
    with pytest.raises(CorruptDataError, match="record handle"):
        decode_event(bad)


def test_an_event_above_max_event_bytes_is_refused_before_decoding() -> None:
    from walstream.driver.scheduler.tracker_events import MAX_EVENT_BYTES

    assert EVENT_CODEC.max_bytes == MAX_EVENT_BYTES >= 256 * 1024 * 1024
    with pytest.raises(CorruptDataError, match="max 10"):
        EVENT_CODEC.decode(VALID["addition"], max_bytes=10)
