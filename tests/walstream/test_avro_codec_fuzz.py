"""Fuzz of the shared envelope codec: garbage, truncated, oversized and mistyped input."""

from __future__ import annotations

import pytest

from tests.walstream.fuzz_checks import (
    FlippedBytes,
    TruncationsRaise,
    decodes_or_typed_error,
    huge_lengths,
)
from walstream.avro_codec import VersionedCodec
from walstream.errors import CorruptDataError

SCHEMA = {
    "type": "record",
    "name": "Thing",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "bytes"}},
        {"name": "conf", "type": {"type": "map", "values": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
CODEC = VersionedCodec("thing", b"WSZZ", {1: SCHEMA})
VALID = CODEC.encode({"id": 7, "name": "é", "tags": [b"a", b"bc"], "conf": {"k": "v"},
                      "note": "n"})
PREFIX = CODEC.magic + b"\x01"


class TestVersionedCodecDecoder(TruncationsRaise, FlippedBytes):
    decode = staticmethod(CODEC.decode)
    error = CorruptDataError
    valid = {"thing": VALID}
    prefixes = (PREFIX,)


def test_huge_declared_lengths_raise_without_allocating() -> None:
    # The string length, the array count, a bytes length inside it, the map count.
    cases = [*huge_lengths(PREFIX + b"\x0e"), *huge_lengths(PREFIX + b"\x0e\x02a"),
             *huge_lengths(PREFIX + b"\x0e\x02a\x02"), *huge_lengths(PREFIX + b"\x0e\x02a\x00")]
    for data in cases:
        assert decodes_or_typed_error(CODEC.decode, data) is None


def test_invalid_utf8_in_a_string_raises_a_typed_error() -> None:
    with pytest.raises(CorruptDataError):
        CODEC.decode(PREFIX + b"\x0e\x04\xff\xfe\x00\x00\x00")


def test_input_above_the_codecs_max_bytes_is_refused_before_decoding() -> None:
    bounded = VersionedCodec("thing", b"WSZZ", {1: SCHEMA}, max_bytes=4096)
    with pytest.raises(CorruptDataError, match="max 4096"):
        bounded.decode(VALID + bytes(4096))
    with pytest.raises(CorruptDataError, match="max 8"):
        CODEC.decode(VALID, max_bytes=8)
    bytearray_and_view = (bytearray(VALID), memoryview(VALID))
    assert all(CODEC.decode(v) == CODEC.decode(VALID) for v in bytearray_and_view)


@pytest.mark.parametrize(
    "field_type",
    [{"type": "array", "items": "null"},
     {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}},
     ["null", "Thing"]],
    ids=["array-of-null", "array-of-empty-record", "recursive"],
)
def test_schemas_that_decode_without_consuming_input_are_refused(field_type: object) -> None:
    from walstream.errors import ConfigError

    schema = {"type": "record", "name": "Thing", "fields": [{"name": "x", "type": field_type}]}
    with pytest.raises(ConfigError, match="unbounded"):
        VersionedCodec("thing", b"WSZZ", {1: schema})
