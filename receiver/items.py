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


def encode_item(item: Any) -> bytes:
    if isinstance(item, bytes | bytearray | memoryview):
        return b"b" + bytes(item)
    if isinstance(item, str):
        return b"s" + item.encode("utf-8", "surrogatepass")
    if (
        isinstance(item, tuple)
        and len(item) == 2
        and all(x is None or isinstance(x, bytes | str) for x in item)
    ):
        buf = io.BytesIO()
        buf.write(b"k")
        fastavro.schemaless_writer(buf, _PAIR_SCHEMA, {"key": item[0], "value": item[1]})
        return buf.getvalue()
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
