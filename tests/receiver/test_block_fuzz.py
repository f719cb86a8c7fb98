"""Fuzz of the block decoder: every input decodes or raises CorruptDataError."""

from __future__ import annotations

import pytest

from tests.walstream.fuzz_checks import (
    FlippedBytes,
    TruncationsRaise,
    decodes_or_typed_error,
    huge_lengths,
)
from walstream.avro_codec import avro_long
from walstream.errors import CorruptDataError
from walstream.receiver.block import BLOCK_CODEC, Block, SourceRange, block_items
from walstream.receiver.items import encode_item

VALID = Block(3, "input-3-x", [encode_item(x) for x in (b"a", "é", ("k", None))],
              (SourceRange("t", 0, 10, 13),)).encode()
VALID_TEXT = Block(3, "input-3-t", [encode_item(x) for x in ("a", "é", "", "line")],
                   (SourceRange("t", 0, 10, 14),)).encode()
VALID_PAIRS = Block(3, "input-3-v", [encode_item((None, x)) for x in ("a", "é", "", "line")],
                    (SourceRange("t", 0, 10, 14),)).encode()
PREFIX = BLOCK_CODEC.magic + b"\x01"
STREAM = avro_long(3)


class TestBlockDecoder(TruncationsRaise, FlippedBytes):
    decode = staticmethod(Block.decode)
    error = CorruptDataError
    valid = {"block": VALID, "text block": VALID_TEXT, "keyless pairs block": VALID_PAIRS}
    prefixes = (PREFIX, BLOCK_CODEC.magic + b"\x02", BLOCK_CODEC.magic + b"\x03")


class TestBlockItemsDecoder(TruncationsRaise, FlippedBytes):
    """What a batch's task decodes a block with: the same contract."""

    decode = staticmethod(block_items)
    error = CorruptDataError
    valid = {"block": VALID, "text block": VALID_TEXT, "keyless pairs block": VALID_PAIRS}
    prefixes = (PREFIX, BLOCK_CODEC.magic + b"\x02", BLOCK_CODEC.magic + b"\x03")


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


def test_a_block_above_max_bytes_is_refused_before_decoding() -> None:
    from walstream.receiver.block import MAX_BLOCK_BYTES

    assert MAX_BLOCK_BYTES >= 256 * 1024 * 1024
    with pytest.raises(CorruptDataError, match=f"max {len(VALID) - 1}"):
        Block.decode(VALID, max_bytes=len(VALID) - 1)
    assert Block.decode(VALID, max_bytes=len(VALID)).stream_id == 3
