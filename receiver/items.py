"""How received items are stored inside a block: one tagged byte string each.

``b"b"+bytes`` for bytes, ``b"s"+utf-8`` for str, ``b"v"+utf-8`` for a
``(None, str)`` pair (a Kafka record with no key: what Kafka receivers mostly
store), ``b"k"+Avro{key, value}`` for any other ``(key, value)`` pair of
bytes/str/None, and ``b"j"+JSON`` for other JSON-representable values (numbers,
lists, dicts). Other
objects cannot be encoded: :class:`BadRecordError`, so that a block never holds
pickled user objects and stays readable by any release that knows its version.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from walstream.avro_codec import avro_long
from walstream.receiver.errors import BadRecordError, CorruptItemError
from walstream.wal.framing import DEFAULT_MAX_RECORD_BYTES

#: The largest item ``decode_item`` reads: an item is never larger than the WAL
#: record holding its block (the WAL's default ``max_record_bytes``).
MAX_ITEM_BYTES = DEFAULT_MAX_RECORD_BYTES

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
# Hand-written because it runs once per received record and fastavro's writer has a
# fixed cost per call (docs/decisions/hand-laid-avro-encoders.md);
# tests/receiver/test_items.py checks it is byte-identical to fastavro's encoding of
# _PAIR_SCHEMA.

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
    """``encode_item((key.decode(), value.decode()))`` without decoding to ``str``
    and encoding back: the Kafka receiver's default (UTF-8) path for one record.
    Each payload is copied once. Raises ``UnicodeDecodeError`` for bytes that are
    not UTF-8."""
    if key is None and value is not None:  # the usual Kafka record: no key
        if not value.isascii():
            value.decode("utf-8")
        return VALUE_TAG + value
    parts = [b"k"]
    _utf8_parts(key, parts)
    _utf8_parts(value, parts)
    return b"".join(parts)


#: The tag of a ``str`` item (what text receivers store); block v2 relies on it too.
STR_TAG = b"s"
#: The tag of a ``(None, str)`` item (a Kafka record with no key); block v3 relies on it.
VALUE_TAG = b"v"

_BYTES_LIKE = (bytes, bytearray, memoryview)
_PAIR_PART = (bytes, str)


def encode_item(item: Any) -> bytes:
    # Runs once per received record: plain isinstance with type tuples and no
    # generator, which a generic pair check with all(...) would create per record.
    if isinstance(item, _BYTES_LIKE):
        return b"b" + bytes(item)
    if isinstance(item, str):
        return b"s" + item.encode("utf-8", "surrogatepass")
    if isinstance(item, tuple) and len(item) == 2:
        key, value = item
        if key is None and isinstance(value, str):
            try:  # strict, as a pair's strings are (_pair_branch)
                return VALUE_TAG + value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise BadRecordError(f"a (key, value) string is not valid UTF-8: {exc}") from exc
        if (key is None or isinstance(key, _PAIR_PART)) and (
            value is None or isinstance(value, _PAIR_PART)
        ):
            return encode_pair(key, value)
    try:
        return b"j" + json.dumps(item, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadRecordError(
            f"cannot encode a {type(item).__name__} item: store bytes, str, (key, value) "
            f"pairs or JSON values ({exc})"
        ) from exc


def _decode_pair(body: bytes) -> tuple[bytes | str | None, bytes | str | None]:
    buf = io.BytesIO(body)
    try:
        d = fastavro.schemaless_reader(buf, _PAIR_SCHEMA, None)
    except Exception as exc:  # fastavro raises EOFError, IndexError, UnicodeDecodeError...
        raise CorruptItemError(f"a (key, value) item does not decode: {exc!r}") from exc
    if not isinstance(d, dict):
        raise CorruptItemError(f"a (key, value) item decoded to a {type(d).__name__}")
    if buf.tell() != len(body):
        raise CorruptItemError(f"{len(body) - buf.tell()} trailing bytes after a (key, value) item")
    return (d["key"], d["value"])


def decode_item(data: bytes | bytearray | memoryview, max_bytes: int = MAX_ITEM_BYTES) -> Any:
    """The item ``encode_item`` stored as ``data``.

    Raises :class:`CorruptItemError` (a ``BadRecordError`` and a
    ``CorruptDataError``) for anything else: bytes that are not an item,
    truncated or invalid UTF-8, JSON nested deeper than the interpreter's
    recursion limit, input above ``max_bytes`` (refused before decoding) or not
    bytes at all. Never another exception type; time and memory are linear in
    ``len(data)``.
    """
    if not isinstance(data, bytes):
        if not isinstance(data, bytearray | memoryview):
            raise CorruptItemError(f"item: a {type(data).__name__} is not bytes")
        data = bytes(data)
    if len(data) > max_bytes:
        raise CorruptItemError(f"an item of {len(data)} bytes (max {max_bytes})")
    tag, body = data[:1], data[1:]
    try:
        if tag == b"b":
            return body
        if tag == b"s":
            return body.decode("utf-8", "surrogatepass")
        if tag == VALUE_TAG:
            return (None, body.decode("utf-8"))
        if tag == b"k":
            return _decode_pair(body)
        if tag == b"j":
            return json.loads(body)
    except UnicodeDecodeError as exc:
        raise CorruptItemError(f"a {tag.decode()!r} item is not valid UTF-8: {exc}") from exc
    except RecursionError as exc:
        raise CorruptItemError("a JSON item is nested too deeply to decode") from exc
    except ValueError as exc:  # JSONDecodeError, and an integer over int_max_str_digits
        raise CorruptItemError(f"a JSON item does not decode: {exc}") from exc
    raise CorruptItemError(f"unknown item tag {tag!r} in a block")


_STR_TAG = STR_TAG[0]


def decode_items(records: list[bytes]) -> list[Any]:
    """``[decode_item(r) for r in records]`` for the records of one decoded block,
    with ``str`` items (what text receivers store) decoded in place, without a call
    per item. Raises what :func:`decode_item` raises for the first bad record.

    Only for records of a block that ``Block.decode`` accepted: that refused a
    block over the WAL's record limit, which bounds every item in it, so the
    per-item size check has nothing to refuse here.
    """
    try:
        return [r[1:].decode("utf-8", "surrogatepass") if r[0] == _STR_TAG else decode_item(r)
                for r in records]
    except (UnicodeDecodeError, IndexError, TypeError):
        pass  # the item-by-item path names the record and raises CorruptItemError
    return [decode_item(r) for r in records]
