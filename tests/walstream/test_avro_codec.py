"""VersionedCodec: magic + version byte + schemaless Avro body."""

from __future__ import annotations

import pytest

from walstream.avro_codec import VersionedCodec, avro_long
from walstream.errors import ConfigError, CorruptDataError, UnknownSchemaVersionError

MAGIC = b"WSt"

V1 = {
    "type": "record",
    "name": "Thing",
    "fields": [{"name": "id", "type": "long"}, {"name": "payload", "type": "bytes"}],
}
V2 = {
    "type": "record",
    "name": "Thing",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "payload", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def test_round_trip() -> None:
    codec = VersionedCodec("thing", MAGIC, {1: V1})
    datum = {"id": 2**40 + 7, "payload": b"\x00\xffbytes"}
    data = codec.encode(datum)
    assert data.startswith(MAGIC + b"\x01")
    assert codec.peek_version(data) == 1
    assert codec.decode(data) == (1, datum)


def test_foreign_bytes_are_corrupt() -> None:
    codec = VersionedCodec("thing", MAGIC, {1: V1})
    for foreign in (b"", b"W", MAGIC, b"hello world", b'{"id": 1}'):
        with pytest.raises(CorruptDataError) as info:
            codec.decode(foreign)
        assert not isinstance(info.value, UnknownSchemaVersionError)
        assert "thing" in str(info.value)


def test_truncated_body_is_corrupt() -> None:
    codec = VersionedCodec("thing", MAGIC, {1: V1})
    data = codec.encode({"id": 1, "payload": b"x" * 50})
    with pytest.raises(CorruptDataError, match="does not decode"):
        codec.decode(data[:-10])


def test_unknown_version_names_it() -> None:
    old = VersionedCodec("thing", MAGIC, {1: V1})
    new = VersionedCodec("thing", MAGIC, {1: V1, 7: V2})
    data = new.encode({"id": 1, "payload": b"p", "note": "hi"})
    assert data[len(MAGIC)] == 7
    with pytest.raises(UnknownSchemaVersionError) as info:
        old.decode(data)
    assert info.value.version == 7
    assert info.value.known == (1,)
    assert "version 7" in str(info.value)
    assert isinstance(info.value, CorruptDataError)
    with pytest.raises(UnknownSchemaVersionError, match="version 3"):
        old.encode({"id": 1, "payload": b""}, version=3)


def test_trailing_bytes_are_corrupt() -> None:
    codec = VersionedCodec("thing", MAGIC, {1: V1})
    data = codec.encode({"id": 1, "payload": b"p"})
    with pytest.raises(CorruptDataError, match="trailing"):
        codec.decode(data + b"\x00")


def test_two_versions_readable() -> None:
    codec = VersionedCodec("thing", MAGIC, {1: V1, 2: V2})
    assert codec.latest == 2 and codec.known == (1, 2)
    v1 = codec.encode({"id": 1, "payload": b"a"}, version=1)
    v2 = codec.encode({"id": 2, "payload": b"b", "note": "n"})
    assert codec.decode(v1) == (1, {"id": 1, "payload": b"a"})
    assert codec.decode(v2) == (2, {"id": 2, "payload": b"b", "note": "n"})
    # Old data stays readable by an old-only codec too.
    assert VersionedCodec("thing", MAGIC, {1: V1}).decode(v1) == (1, {"id": 1, "payload": b"a"})


def test_other_magic_is_corrupt() -> None:
    a = VersionedCodec("a", b"AAA", {1: V1})
    b = VersionedCodec("b", b"BBB", {1: V1})
    with pytest.raises(CorruptDataError, match="bad magic"):
        b.decode(a.encode({"id": 1, "payload": b""}))


@pytest.mark.parametrize(
    ("magic", "schemas"),
    [(b"", {1: V1}), (b"123456789", {1: V1}), (MAGIC, {}), (MAGIC, {0: V1}), (MAGIC, {256: V1})],
)
def test_bad_config(magic: bytes, schemas: dict) -> None:
    with pytest.raises(ConfigError):
        VersionedCodec("thing", magic, schemas)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 127, 8191, 8192, -1, -64, -65, 2**31, 2**62, -(2**63)])
def test_avro_long_is_fastavros_long(n: int) -> None:
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, "long", n)
    assert avro_long(n) == buf.getvalue()
