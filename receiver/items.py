"""How received items are stored inside a block: one tagged byte string each.

``b"b"+bytes`` for bytes, ``b"s"+utf-8`` for str, ``b"k"+Avro{key, value}`` for a
``(key, value)`` pair of bytes/str/None (what Kafka receivers store), and
``b"j"+JSON`` for other JSON-representable values (numbers, lists, dicts). Other
objects cannot be encoded: :class:`BadRecordError`, so that a block never holds
pickled user objects and stays readable by any release that knows its version.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from receiver.errors import BadRecordError
from walstream.avro_codec import avro_long

_PAIR_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "Pair",
        "namespace": "walstream.receiver",
        "fields": [
            {"name": "key", "type": ["null", "bytes", "string"]},
            {"name": "value", "type": ["null", "bytes", "string"]},
        ],
    }
)


# Avro binary of one branch of the union ["null", "bytes", "string"]: the branch
# index as a zig-zag varint (0, 2, 4), then a zig-zag varint length and the bytes.
# Hand-written because it runs once per received record (fastavro's writer costs
# several microseconds per call); tests/receiver/test_items.py checks it is
# byte-identical to fastavro's encoding of _PAIR_SCHEMA.

def _pair_branch(x: bytes | str | None) -> bytes:
    if x is None:
        return b"\x00"
    if isinstance(x, str):
        try:
            data = x.encode("utf-8")  # strict: Avro strings are valid UTF-8
        except UnicodeEncodeError as exc:
            raise BadRecordError(f"a (key, value) string is not valid UTF-8: {exc}") from exc
        return b"\x04" + avro_long(len(data)) + data
    data = bytes(x)
    return b"\x02" + avro_long(len(data)) + data


def encode_pair(key: bytes | str | None, value: bytes | str | None) -> bytes:
    """The item encoding of a ``(key, value)`` pair (what Kafka receivers store)."""
    return b"k" + _pair_branch(key) + _pair_branch(value)


def _utf8_parts(x: bytes | None, parts: list[bytes]) -> None:
    if x is None:
        parts.append(b"\x00")
        return
    if not x.isascii():  # ASCII is UTF-8; isascii() checks without building a str
        x.decode("utf-8")  # validates: raises UnicodeDecodeError, as utf8_decoder would
    parts += (b"\x04", avro_long(len(x)), x)


def encode_utf8_pair(key: bytes | None, value: bytes | None) -> bytes:
    """``encode_pair(key.decode(), value.decode())`` without decoding to ``str`` and
    encoding back: the Kafka receiver's default (UTF-8) path, once per record.
    Each payload is copied once (one join). Raises ``UnicodeDecodeError`` for bytes
    that are not UTF-8."""
    if key is None and value is not None:  # the usual Kafka record: no key
        if not value.isascii():
            value.decode("utf-8")
        return b"".join((b"k\x00\x04", avro_long(len(value)), value))
    parts = [b"k"]
    _utf8_parts(key, parts)
    _utf8_parts(value, parts)
    return b"".join(parts)


_BYTES_LIKE = (bytes, bytearray, memoryview)
_PAIR_PART = (bytes, str)


def encode_item(item: Any) -> bytes:
    # Runs once per received record: plain isinstance with type tuples and no
    # generator (the generic pair check with all(...) cost ~5 us per record).
    if isinstance(item, _BYTES_LIKE):
        return b"b" + bytes(item)
    if isinstance(item, str):
        return b"s" + item.encode("utf-8", "surrogatepass")
    if isinstance(item, tuple) and len(item) == 2:
        key, value = item
        if (key is None or isinstance(key, _PAIR_PART)) and (
            value is None or isinstance(value, _PAIR_PART)
        ):
            return encode_pair(key, value)
    try:
        return b"j" + json.dumps(item, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise BadRecordError(
            f"cannot encode a {type(item).__name__} item: store bytes, str, (key, value) "
            f"pairs or JSON values ({exc})"
        ) from exc


def decode_item(data: bytes) -> Any:
    tag, body = data[:1], data[1:]
    if tag == b"b":
        return bytes(body)
    if tag == b"s":
        return body.decode("utf-8", "surrogatepass")
    if tag == b"k":
        d = fastavro.schemaless_reader(io.BytesIO(body), _PAIR_SCHEMA, None)
        assert isinstance(d, dict)
        return (d["key"], d["value"])
    if tag == b"j":
        return json.loads(body)
    raise BadRecordError(f"unknown item tag {tag!r} in a block")
