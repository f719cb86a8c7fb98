"""Fuzz of WAL frames and their reassembly: values or CorruptRecordError, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.walstream.fuzz_checks import (
    FUZZ,
    WRONG_TYPES,
    TruncationsRaise,
    decodes_or_typed_error,
    garbage,
    huge_lengths,
)
from walstream.avro_codec import avro_long
from walstream.wal.errors import CorruptRecordError
from walstream.wal.framing import FRAME_CODEC, Reassembler, decode_frame, encode_record

PREFIX = FRAME_CODEC.magic + b"\x01"
RECORD = bytes(range(256)) * 12
FRAMES = encode_record(RECORD, 1024)


def _decode(value: bytes) -> object:
    return decode_frame(value, "t@0")


class TestFrameDecoder(TruncationsRaise):
    decode = staticmethod(_decode)
    error = CorruptRecordError
    valid = {"middle-chunk": FRAMES[1]}
    prefixes = (PREFIX,)
    # None is a Kafka tombstone: refused as a null value, not as "not bytes".
    wrong_types = tuple(w for w in WRONG_TYPES if w is not None)


def test_huge_declared_lengths_raise_without_allocating() -> None:
    cases = [
        *huge_lengths(PREFIX),  # chunk index
        *huge_lengths(PREFIX + b"\x00"),  # chunk count
        *huge_lengths(PREFIX + b"\x00\x02"),  # total length
        *huge_lengths(PREFIX + b"\x00\x02\x0a\x00"),  # the data's length
    ]
    for data in cases:
        assert decodes_or_typed_error(_decode, data) is None


frame_fields = st.fixed_dictionaries({
    "chunk_index": st.integers(-(2**31), 2**31 - 1),
    "chunk_count": st.integers(-(2**31), 2**31 - 1),
    "total_length": st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 4096)),
    "crc32": st.integers(-(2**63), 2**63 - 1),
    "data": st.binary(max_size=64),
})


@FUZZ
@given(st.lists(st.one_of(frame_fields.map(FRAME_CODEC.encode), st.sampled_from(FRAMES),
                          garbage), max_size=12))
def test_any_frame_sequence_reassembles_or_raises_typed_errors(values: list[bytes]) -> None:
    """Whatever frames a segment holds, feeding them yields records or typed errors,
    and the reassembler never holds more than one declared record's bytes."""
    asm = Reassembler(on_torn=lambda err: None)

    def feed(value: bytes) -> object:
        return asm.feed(decode_frame(value, "t@0"), "t@0")

    for value in values:
        record = decodes_or_typed_error(feed, value)
        assert record is None or isinstance(record, bytes)


@FUZZ
@given(st.integers(0, 2), st.lists(st.integers(0, 2), max_size=6))
def test_valid_frames_in_any_order_give_the_record_only_when_whole(
    first: int, rest: list[int]
) -> None:
    asm = Reassembler(on_torn=lambda err: None)
    order = [first, *rest]
    out = [decodes_or_typed_error(lambda v: asm.feed(decode_frame(v, "t"), "t"), FRAMES[i])
           for i in order]
    for i, got in enumerate(out):
        if got is not None:
            assert got == RECORD
            assert order[i - 2:i + 1] == [0, 1, 2]  # the three chunks in a row


def test_frame_value_above_the_largest_frame_is_refused_before_decoding() -> None:
    with pytest.raises(CorruptRecordError, match="larger than any frame"):
        decode_frame(PREFIX + avro_long(0) + bytes(2000), "t@0", max_record_bytes=1024)
