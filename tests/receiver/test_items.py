"""Item encoding: tagged bytes, never pickle; un-encodable objects are BadRecordError."""

from __future__ import annotations

from typing import Any

import pytest

from walstream.receiver.errors import BadRecordError, CorruptItemError, ReceiverError
from walstream.receiver.items import decode_item, decode_items, encode_item, encode_utf8_pair


@pytest.mark.parametrize(
    "item",
    [
        b"",
        b"plain bytes",
        bytes(range(256)),
        "",
        "ascii",
        "héllo wörld ✓ 日本語 🎉",
        "lone surrogate \ud800 kept",
        "bytes-looking b'x'",
    ],
)
def test_bytes_and_str_round_trip_with_their_type(item: Any) -> None:
    out = decode_item(encode_item(item))
    assert out == item
    assert type(out) is type(item)


@pytest.mark.parametrize(
    "pair",
    [
        (None, None),
        (b"k", b"v"),
        ("k", "v"),
        (None, b"\x00\xff"),
        ("ключ", None),
        (b"", ""),
        ("键", "värde 🎉"),
        (b"key", "text"),
        ("text", b"\x80binary"),
    ],
)
def test_key_value_pairs_round_trip_with_their_types(pair: tuple[Any, Any]) -> None:
    out = decode_item(encode_item(pair))
    assert out == pair
    assert type(out) is tuple
    assert [type(x) for x in out] == [type(x) for x in pair]


@pytest.mark.parametrize(
    "value",
    [0, -7, 2**53, 3.25, True, False, None, [], {}, [1, "a", None, 2.5],
     {"a": {"b": [1, 2, {"c": "é"}]}, "n": None}],
)
def test_json_values_round_trip(value: Any) -> None:
    assert decode_item(encode_item(value)) == value


def test_bytearray_and_memoryview_are_stored_as_bytes() -> None:
    assert decode_item(encode_item(bytearray(b"ab"))) == b"ab"
    assert decode_item(encode_item(memoryview(b"cd"))) == b"cd"


def test_str_and_bytes_and_json_strings_are_not_confused() -> None:
    encoded = {encode_item("1"), encode_item(b"1"), encode_item(1), encode_item(["1"])}
    assert len(encoded) == 4
    assert decode_item(encode_item("null")) == "null"
    assert decode_item(encode_item(None)) is None


@pytest.mark.parametrize(
    "bad",
    [object(), {1, 2}, float("nan"), float("inf"), [object()], {"k": object()}, 1 + 2j,
     (None, 5)],
    ids=["object", "set", "nan", "inf", "list-of-object", "dict-of-object", "complex",
         "pair-with-int-is-json-list"],
)
def test_unencodable_objects_raise_bad_record_error(bad: Any) -> None:
    if isinstance(bad, tuple):  # (None, 5) is not a pair of bytes/str: it is a JSON list
        assert decode_item(encode_item(bad)) == [None, 5]
        return
    with pytest.raises(BadRecordError) as info:
        encode_item(bad)
    assert isinstance(info.value, ReceiverError)
    assert type(bad).__name__ in str(info.value)


def test_unknown_tag_raises_bad_record_error() -> None:
    with pytest.raises(BadRecordError, match="unknown item tag"):
        decode_item(b"zpayload")
    with pytest.raises(BadRecordError):
        decode_item(b"")


@pytest.mark.parametrize(
    "pair",
    [
        (None, None),
        (b"", ""),
        ("k", "v"),
        (b"\x00" * 63, "x" * 64),  # the one-byte / two-byte varint length boundary
        ("é" * 100, b"\xff" * 8191),
        (None, "日本" * 5000),
        (b"k", bytes(range(256)) * 600),
    ],
)
def test_hand_written_pair_encoding_is_fastavros(pair: Any) -> None:
    import io

    import fastavro

    from walstream.receiver.items import _PAIR_SCHEMA, encode_pair

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PAIR_SCHEMA, {"key": pair[0], "value": pair[1]})
    assert encode_pair(*pair) == b"k" + buf.getvalue()
    assert decode_item(encode_pair(*pair)) == pair


def test_pair_string_that_is_not_utf8_is_a_bad_record() -> None:
    with pytest.raises(BadRecordError, match="UTF-8"):
        encode_item(("key", "lone surrogate \ud800"))


@pytest.mark.parametrize("key", [None, b"", b"k", "\u00e9t\u00e9".encode(), b"x" * 64, b"y" * 300])
@pytest.mark.parametrize("value", [None, b"", b"v" * 63, b"w" * 64, b"z" * 70_000])
def test_utf8_pair_is_the_pair_of_decoded_strings(key: bytes | None, value: bytes | None) -> None:
    as_str = tuple(None if x is None else x.decode() for x in (key, value))
    assert encode_utf8_pair(key, value) == encode_item(as_str)
    assert decode_item(encode_utf8_pair(key, value)) == as_str


def test_a_keyless_pair_of_a_string_is_its_utf8_after_the_v_tag() -> None:
    # What a Kafka record with no key is stored as; block v3 joins these.
    assert encode_item((None, "caf\u00e9")) == b"v" + "caf\u00e9".encode()
    assert decode_item(b"v" + "caf\u00e9".encode()) == (None, "caf\u00e9")
    assert decode_item(b"v") == (None, "")
    with pytest.raises(CorruptItemError, match="UTF-8"):
        decode_item(b"v\xc3")
    with pytest.raises(CorruptItemError, match="UTF-8"):  # strict, as pair strings are
        decode_item(b"v" + "\ud800".encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("pair", [(b"\xff", b"ok"), (None, b"bad \xc3")])
def test_utf8_pair_refuses_bytes_that_are_not_utf8(pair: tuple[bytes | None, bytes]) -> None:
    with pytest.raises(UnicodeDecodeError):
        encode_utf8_pair(*pair)


def test_decoding_a_blocks_items_at_once_equals_decoding_each() -> None:
    items = ["plain", "caf\u00e9", "", b"raw", ("k", b"v"), (None, "v"), 42, [1, "x"], "\ud800"]
    records = [encode_item(i) for i in items]
    assert decode_items(records) == [decode_item(r) for r in records]
    assert decode_items([]) == []


@pytest.mark.parametrize("bad", [b"", b"s\xff\xfe", b"?unknown", b"j{"])
def test_a_bad_record_among_many_raises_what_decoding_it_alone_raises(bad: bytes) -> None:
    records = [encode_item("good"), bad, encode_item("after")]
    with pytest.raises(CorruptItemError) as alone:
        decode_item(bad)
    with pytest.raises(CorruptItemError) as together:
        decode_items(records)
    assert str(together.value) == str(alone.value)
