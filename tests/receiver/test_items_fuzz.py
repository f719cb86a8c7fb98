"""Fuzz of the item decoder: every stored item decodes or raises a typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.walstream.fuzz_checks import (
    FUZZ,
    DecoderContract,
    decodes_or_typed_error,
    huge_lengths,
    truncations,
)
from walstream.errors import CorruptDataError
from walstream.receiver.errors import BadRecordError
from walstream.receiver.items import decode_item, encode_item, encode_pair

VALID = [encode_item(x) for x in (b"raw", "text é", ("key", b"value"), (None, "v"),
                                  {"a": [1, 2.5, None, "x"]}, [True, {"b": {}}])]


class TestItemDecoder(DecoderContract):
    decode = staticmethod(decode_item)
    error = CorruptDataError
    prefixes = (b"b", b"s", b"v", b"k", b"j", b"x", b"")  # every tag, and none


@pytest.mark.parametrize("valid", VALID, ids=lambda v: v[:1].decode())
def test_every_truncation_of_a_valid_item_decodes_or_raises_a_typed_error(valid: bytes) -> None:
    """A cut raw or text item may be a valid shorter one: no TruncationsRaise here."""
    for cut in truncations(valid):
        decodes_or_typed_error(decode_item, cut)


@pytest.mark.parametrize(
    "data",
    [b"k", b"k\x00", b"k\x02", b"k\x02\x0a", b"k\x04\x06ab", b"k\x06", b"k\x7f",
     b"k\x00\x00trailing"],
    ids=["empty", "key-only", "bytes-no-len", "short-bytes", "short-string", "bad-branch",
         "negative-branch", "trailing-bytes"],
)
def test_a_broken_pair_raises_a_corrupt_data_error(data: bytes) -> None:
    with pytest.raises(CorruptDataError):
        decode_item(data)
    with pytest.raises(BadRecordError):  # and stays a BadRecordError for older callers
        decode_item(data)


def test_huge_declared_pair_lengths_raise_without_allocating() -> None:
    cases = [*huge_lengths(b"k\x02"), *huge_lengths(b"k\x04"), *huge_lengths(b"k\x00\x02"),
             *huge_lengths(b"k")]
    for data in cases:
        assert decodes_or_typed_error(decode_item, data) is None


@pytest.mark.parametrize("depth", [10_000, 200_000])
@pytest.mark.parametrize("open_close", [("[", "]"), ('{"a":', "}")], ids=["list", "dict"])
def test_deeply_nested_json_raises_a_typed_error(depth: int, open_close: tuple[str, str]) -> None:
    text = open_close[0] * depth + "1" + open_close[1] * depth
    assert decodes_or_typed_error(decode_item, b"j" + text.encode()) is None


def test_nesting_that_encode_item_accepts_still_decodes() -> None:
    nested: object = 1
    for _ in range(200):
        nested = [nested, {"k": nested}] if isinstance(nested, int) else [nested]
    assert decode_item(encode_item(nested)) == nested


@pytest.mark.parametrize(
    "data",
    [b"j\xff", b"j{\"a\": \xc3}", b"j[1, 2", b"j", b"jNaN-ish", b"j" + b"9" * 5000,
     b"s\xff\xfe", b"s\xc3", b"k\x04\x04\xff\xfe\x00"],
    ids=["json-not-utf8", "json-bad-utf8-string", "json-truncated", "json-empty",
         "json-garbage", "json-int-too-long", "str-not-utf8", "str-truncated-utf8",
         "pair-string-not-utf8"],
)
def test_invalid_utf8_and_json_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(CorruptDataError):
        decode_item(data)


def test_bytes_like_input_decodes_like_bytes() -> None:
    for valid in VALID:
        assert decode_item(bytearray(valid)) == decode_item(memoryview(valid)) == decode_item(valid)


def test_an_item_above_max_bytes_is_refused_before_decoding() -> None:
    from walstream.receiver.items import MAX_ITEM_BYTES

    assert MAX_ITEM_BYTES >= 8 * 1024 * 1024  # never below the supervisor's default record
    with pytest.raises(CorruptDataError, match="max 64"):
        decode_item(b"j" + b" " * 64 + b"1", max_bytes=64)
    assert decode_item(b"j" + b" " * 62 + b"1", max_bytes=64) == 1


@FUZZ
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64), st.none()),
       st.one_of(st.binary(max_size=64), st.text(max_size=64), st.none()))
def test_every_encodable_pair_round_trips(key: bytes | str | None,
                                         value: bytes | str | None) -> None:
    try:
        data = encode_pair(key, value)
    except BadRecordError:
        return  # a lone surrogate: refused at store time
    assert decode_item(data) == (key, value)
