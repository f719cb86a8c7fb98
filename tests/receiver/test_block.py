"""Block and ReceivedBlockInfo codecs: versioned Avro, foreign bytes are CorruptDataError."""

from __future__ import annotations

import pytest

from receiver.block import BLOCK_CODEC, Block, SourceRange, block_items
from receiver.block_info import ReceivedBlockInfo
from receiver.errors import CorruptItemError
from receiver.items import decode_item, encode_item
from wal.handle import RecordHandle
from walstream.errors import CorruptDataError, UnknownSchemaVersionError


def sample_block() -> Block:
    return Block(
        stream_id=4,
        block_id="input-4-abc",
        records=[encode_item(x) for x in (b"a", "é", ("k", None), {"n": 1})],
        source=(SourceRange("t1", 0, 10, 14), SourceRange("t2", 3, 0, 1)),
    )


def test_block_round_trip_with_source_ranges() -> None:
    block = sample_block()
    out = Block.decode(block.encode())
    assert out == block
    assert [decode_item(r) for r in out.records] == [b"a", "é", ("k", None), {"n": 1}]
    assert out.source[0].until_offset == 14


def test_empty_block_round_trip() -> None:
    block = Block(0, "input-0-x", [])
    assert Block.decode(block.encode()) == block


def test_block_encoding_is_versioned_not_pickled() -> None:
    data = sample_block().encode()
    assert data.startswith(b"WSBK\x01")
    assert b"\x80\x04" not in data[:2]  # no pickle protocol header


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage that is not a block", b"\x80\x04\x95pickled", b"WSBK", b"WSB"],
)
def test_foreign_bytes_raise_corrupt_data_error(data: bytes) -> None:
    with pytest.raises(CorruptDataError):
        Block.decode(data)


def test_truncated_or_padded_blocks_raise_corrupt_data_error() -> None:
    data = sample_block().encode()
    with pytest.raises(CorruptDataError):
        Block.decode(data[:-3])
    with pytest.raises(CorruptDataError):
        Block.decode(data + b"\x00\x00")


def test_unknown_version_raises_a_corrupt_data_subclass_naming_it() -> None:
    data = bytearray(sample_block().encode())
    data[len(BLOCK_CODEC.magic)] = 99
    with pytest.raises(UnknownSchemaVersionError, match="99") as info:
        Block.decode(bytes(data))
    assert isinstance(info.value, CorruptDataError)


def test_received_block_info_dict_round_trip() -> None:
    info = ReceivedBlockInfo(
        4, "input-4-abc", 4, RecordHandle("wal-topic", 2, 17, chunks=3, index=1),
        (SourceRange("t1", 0, 10, 14),),
    )
    assert ReceivedBlockInfo.from_dict(info.to_dict()) == info
    d = info.to_dict()
    del d["source"]
    assert ReceivedBlockInfo.from_dict(d).source == ()


@pytest.mark.parametrize(
    "block",
    [
        sample_block(),
        Block(0, "input-0-x", []),
        Block(-3, "ünïcode-block", [b"", b"x" * 63, b"y" * 64, b"z" * 300_000]),
        Block(2**31 - 1, "b", [], (SourceRange("t", 7, 0, 2**40),)),
        # str items, but one holds a newline: not text, so v1
        Block(1, "b", [encode_item(s) for s in ("a", "b\nc", "d")], ()),
        Block(1, "b", [encode_item(s) for s in ("a", "b")] + [encode_item(b"\nsx")], ()),
    ],
)
def test_hand_written_v1_encoding_is_byte_identical_to_fastavro(block: Block) -> None:
    reference = BLOCK_CODEC.encode({
        "stream_id": block.stream_id,
        "block_id": block.block_id,
        "records": block.records,
        "source": [s.to_dict() for s in block.source],
    }, version=1)
    assert block.encode() == reference
    assert Block.decode(block.encode()) == block
    try:
        expected = [decode_item(r) for r in block.records]
    except CorruptItemError:  # records that are not items: the block's items fail too
        with pytest.raises(CorruptItemError):
            block_items(block.encode())
    else:
        assert block_items(block.encode()) == expected


TEXT_ITEMS = [
    [str(i) for i in range(200)],
    [""],
    ["", "", ""],
    ["é", "\u2028 line separator", "tab\tand\rreturn", "s", "ss", "\ud800 lone surrogate"],
    ["x" * 300_000, "y"],
]


@pytest.mark.parametrize("items", TEXT_ITEMS)
def test_a_block_of_lines_is_v2_text_byte_identical_to_fastavro(items: list[str]) -> None:
    block = Block(7, "input-7-t", [encode_item(s) for s in items],
                  (SourceRange("t", 1, 5, 6),))
    data = block.encode()
    assert data.startswith(b"WSBK\x02")
    assert data == BLOCK_CODEC.encode({
        "stream_id": 7, "block_id": "input-7-t", "count": len(items),
        "text": "\n".join(items).encode("utf-8", "surrogatepass"),
        "source": [s.to_dict() for s in block.source]})
    assert block_items(data) == items
    assert Block.decode(data) == block


def test_a_v2_block_whose_count_disagrees_with_its_lines_is_corrupt() -> None:
    for count, text in ((3, b"a\nb"), (1, b"a\nb"), (0, b"")):
        data = BLOCK_CODEC.encode({"stream_id": 1, "block_id": "b", "count": count,
                                   "text": text, "source": []})
        with pytest.raises(CorruptDataError, match="count"):
            block_items(data)
        with pytest.raises(CorruptDataError, match="count"):
            Block.decode(data)


def test_a_v2_block_of_invalid_utf8_is_a_corrupt_item() -> None:
    data = BLOCK_CODEC.encode({"stream_id": 1, "block_id": "b", "count": 2,
                               "text": b"ok\n\xff\xfe", "source": []})
    with pytest.raises(CorruptItemError, match="UTF-8"):
        block_items(data)


def test_a_record_that_is_not_bytes_fails_to_encode() -> None:
    with pytest.raises(TypeError):
        Block(0, "b", ["text"]).encode()  # type: ignore[list-item]
