"""Block and ReceivedBlockInfo codecs: versioned Avro, foreign bytes are CorruptDataError."""

from __future__ import annotations

import pytest

from walstream.errors import CorruptDataError, UnknownSchemaVersionError
from walstream.receiver.block import BLOCK_CODEC, Block, SourceRange, block_items
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.errors import BadRecordError, CorruptItemError
from walstream.receiver.items import decode_item, encode_item
from walstream.wal.handle import RecordHandle


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
        "source": [s.to_dict() for s in block.source]}, version=2)
    assert block_items(data) == items
    assert Block.decode(data) == block


# Kafka records with no key: (None, str) pairs. A lone surrogate is not a valid pair
# string (encode_item refuses it), so it is not here.
VALUE_ITEMS = [items for items in TEXT_ITEMS if "\ud800 lone surrogate" not in items]


@pytest.mark.parametrize("values", VALUE_ITEMS)
def test_a_block_of_keyless_pairs_is_v3_text_byte_identical_to_fastavro(
        values: list[str]) -> None:
    pairs = [(None, v) for v in values]
    block = Block(7, "input-7-k", [encode_item(p) for p in pairs], (SourceRange("t", 1, 5, 6),))
    data = block.encode()
    assert data.startswith(b"WSBK\x03")
    assert data == BLOCK_CODEC.encode({
        "stream_id": 7, "block_id": "input-7-k", "count": len(values),
        "text": "\n".join(values).encode("utf-8"),
        "source": [s.to_dict() for s in block.source]}, version=3)
    assert block_items(data) == pairs
    assert Block.decode(data) == block


@pytest.mark.parametrize("items", [
    [(None, "a"), "b"],                 # two tags: v1
    [(None, "a"), (None, "b\nc")],      # a value with a newline: v1
    [(None, "a"), ("k", "b")],          # a key: v1
    [(None, "a"), (None, None)],        # no value: v1
])
def test_blocks_that_are_not_all_keyless_one_line_pairs_stay_v1(items: list[object]) -> None:
    block = Block(1, "b", [encode_item(i) for i in items], ())
    data = block.encode()
    assert data.startswith(b"WSBK\x01")
    assert block_items(data) == items
    assert Block.decode(data) == block


def test_a_keyless_pair_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(BadRecordError):
        encode_item((None, "\ud800"))


@pytest.mark.parametrize("version", [2, 3])
def test_a_text_block_whose_count_disagrees_with_its_lines_is_corrupt(version: int) -> None:
    for count, text in ((3, b"a\nb"), (1, b"a\nb"), (0, b"")):
        data = BLOCK_CODEC.encode({"stream_id": 1, "block_id": "b", "count": count,
                                   "text": text, "source": []}, version=version)
        with pytest.raises(CorruptDataError, match=f"v{version}.*count"):
            block_items(data)
        with pytest.raises(CorruptDataError, match="count"):
            Block.decode(data)


@pytest.mark.parametrize(("version", "text"), [
    (2, b"ok\n\xff\xfe"), (3, b"ok\n\xff\xfe"),
    (3, "ok\n\ud800".encode("utf-8", "surrogatepass")),  # v2 holds these; v3 never
])
def test_a_text_block_of_invalid_utf8_is_a_corrupt_item(version: int, text: bytes) -> None:
    data = BLOCK_CODEC.encode({"stream_id": 1, "block_id": "b", "count": 2,
                               "text": text, "source": []}, version=version)
    with pytest.raises(CorruptItemError, match="UTF-8"):
        block_items(data)


def test_a_record_that_is_not_bytes_fails_to_encode() -> None:
    with pytest.raises(TypeError):
        Block(0, "b", ["text"]).encode()  # type: ignore[list-item]
