"""Fuzz of the block decoder: every input decodes or raises CorruptDataError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receiver.block import BLOCK_CODEC, Block, SourceRange
from receiver.items import encode_item
from tests.walstream.fuzz_checks import (
    FUZZ,
    WRONG_TYPES,
    decodes_or_typed_error,
    garbage,
    huge_lengths,
    truncations,
)
from walstream.avro_codec import avro_long
from walstream.errors import CorruptDataError

VALID = Block(3, "input-3-x", [encode_item(x) for x in (b"a", "é", ("k", None))],
              (SourceRange("t", 0, 10, 13),)).encode()
PREFIX = BLOCK_CODEC.magic + b"\x01"
STREAM = avro_long(3)


@FUZZ
@given(garbage)
def test_random_bytes_raise_a_typed_error(data: bytes) -> None:
    decodes_or_typed_error(Block.decode, data)


@FUZZ
@given(garbage)
def test_a_valid_envelope_with_a_garbage_body_raises_a_typed_error(body: bytes) -> None:
    decodes_or_typed_error(Block.decode, PREFIX + body)


def test_every_truncation_of_a_valid_block_raises_a_typed_error() -> None:
    for cut in truncations(VALID):
        with pytest.raises(CorruptDataError):
            Block.decode(cut)


def test_huge_declared_lengths_raise_without_allocating() -> None:
    block_id = STREAM + avro_long(1) + b"b"
    cases = [
        *huge_lengths(PREFIX + STREAM),  # the block id's length
        *huge_lengths(PREFIX + block_id),  # the record count
        *huge_lengths(PREFIX + block_id + avro_long(1)),  # one record's length
        *huge_lengths(PREFIX + block_id + b"\x00"),  # the source range count
        *huge_lengths(PREFIX + block_id + b"\x00" + avro_long(1)),  # a topic's length
    ]
    for data in cases:
        assert decodes_or_typed_error(Block.decode, data) is None


def test_invalid_utf8_in_the_block_id_raises_a_typed_error() -> None:
    with pytest.raises(CorruptDataError):
        Block.decode(PREFIX + STREAM + avro_long(2) + b"\xff\xfe" + b"\x00\x00")


@pytest.mark.parametrize("wrong", WRONG_TYPES, ids=lambda w: type(w).__name__)
def test_input_of_the_wrong_type_raises_a_typed_error(wrong: object) -> None:
    with pytest.raises(CorruptDataError, match="not bytes"):
        Block.decode(wrong)  # type: ignore[arg-type]


def test_a_block_above_max_bytes_is_refused_before_decoding() -> None:
    from receiver.block import MAX_BLOCK_BYTES

    assert MAX_BLOCK_BYTES >= 256 * 1024 * 1024
    with pytest.raises(CorruptDataError, match=f"max {len(VALID) - 1}"):
        Block.decode(VALID, max_bytes=len(VALID) - 1)
    assert Block.decode(VALID, max_bytes=len(VALID)).stream_id == 3


@FUZZ
@given(st.integers(min_value=0, max_value=len(VALID) - 1), st.integers(0, 255))
def test_a_flipped_byte_decodes_or_raises_a_typed_error(pos: int, value: int) -> None:
    data = bytearray(VALID)
    data[pos] = value
    decodes_or_typed_error(Block.decode, bytes(data))
