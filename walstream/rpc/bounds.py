"""A bounds check of Avro binary against its schema, run before anything is decoded.

fastavro materialises a whole message, one Python object per array item however
few bytes the item takes on the wire, so a small body of empty records becomes many
times its size in memory before any code can look at it
(docs/decisions/rpc-bounds-before-decoding.md). :func:`check_bounds` walks the
bytes instead, holding nothing, and refuses a body whose arrays hold more items,
or whose strings hold more bytes, than the :class:`Bounds` allow, or that is
truncated or malformed (a varint longer than ten bytes, a negative length, a
boolean other than 0 or 1, an enum or union index out of range, an int out of the
32-bit range). It costs time linear in the bytes it accepts, and stops at the
first bound crossed, so a refusal costs no more than the bound. Only what is
scanned can then be decoded by fastavro.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walstream.errors import ConfigError
from walstream.rpc.errors import RpcMessageError

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class Bounds:
    """``max_items`` per array, ``max_string_bytes`` per string or bytes value;
    ``*_name`` say which setting a refusal names. ``item_limits``: ``(record name,
    max items, setting name)`` for arrays of that named record, instead of
    ``max_items``."""

    max_items: int
    max_string_bytes: int
    items_name: str = "max_items"
    string_name: str = "max_string_bytes"
    item_limits: tuple[tuple[str, int, str], ...] = ()

    def __post_init__(self) -> None:
        if self.max_items < 0 or self.max_string_bytes < 0 or any(
                n < 0 for _, n, _ in self.item_limits):
            raise ConfigError("Bounds: max_items and max_string_bytes must be >= 0")

    def items_limit(self, items: Any) -> tuple[int, str]:
        """The item bound of an array of ``items`` and the setting it names."""
        name = items.get("name") if isinstance(items, dict) else items
        for record, limit, setting in self.item_limits:
            if record == name:
                return limit, setting
        return self.max_items, self.items_name


class _Scan:
    def __init__(self, data: bytes | bytearray | memoryview, pos: int, bounds: Bounds,
                 kind: str) -> None:
        self.data = data
        self.pos = pos
        self.bounds = bounds
        self.kind = kind
        self.names: dict[str, Any] = {}

    def fail(self, what: str) -> RpcMessageError:
        return RpcMessageError(f"{self.kind}: {what} (at byte {self.pos} of {len(self.data)})")

    def long(self) -> int:
        data, pos, end = self.data, self.pos, len(self.data)
        shift = acc = 0
        for i in range(10):
            if pos + i >= end:
                raise self.fail("truncated inside a number")
            b = data[pos + i]
            acc |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos + i + 1
                return (acc >> 1) ^ -(acc & 1)
            shift += 7
        raise self.fail("a number longer than 10 bytes")

    def skip(self, n: int) -> None:
        if n > len(self.data) - self.pos:
            raise self.fail(f"truncated: {n} bytes announced, {len(self.data) - self.pos} left")
        self.pos += n

    def length(self) -> int:
        n = self.long()
        if n < 0:
            raise self.fail(f"negative length {n}")
        if n > self.bounds.max_string_bytes:
            raise self.fail(f"a string of {n} bytes is over the limit of "
                            f"{self.bounds.max_string_bytes} ({self.bounds.string_name})")
        return n

    def value(self, schema: Any) -> None:
        if isinstance(schema, list):  # a union
            index = self.long()
            if not 0 <= index < len(schema):
                raise self.fail(f"union branch {index} of {len(schema)}")
            self.value(schema[index])
            return
        if isinstance(schema, str):
            self.primitive(schema)
            return
        t = schema["type"]
        if t == "record":
            self.names[schema["name"]] = schema
            if "namespace" in schema:
                self.names[f"{schema['namespace']}.{schema['name']}"] = schema
            for f in schema["fields"]:
                self.value(f["type"])
        elif t == "enum":
            index = self.long()
            if not 0 <= index < len(schema["symbols"]):
                raise self.fail(f"enum index {index} of {len(schema['symbols'])} symbols")
        elif t == "array":
            self.array(schema["items"])
        elif isinstance(t, str | list | dict) and set(schema) <= {"type"}:
            self.value(t)
        else:
            raise ConfigError(f"{self.kind}: the bounds check does not support {t!r}")

    def array(self, items: Any) -> None:
        limit, setting = self.bounds.items_limit(items)
        total = 0
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:  # a block with its size in bytes after the count
                count = -count
                self.long()
            total += count
            if total > limit:
                raise self.fail(f"an array of {total} or more items is over the limit of "
                                f"{limit} ({setting})")
            for _ in range(count):
                self.value(items)

    def primitive(self, name: str) -> None:
        if name == "null":
            return
        if name == "boolean":
            self.skip(1)
            if self.data[self.pos - 1] not in (0, 1):
                raise self.fail("a boolean other than 0 or 1")
        elif name == "int":
            if not _INT_MIN <= self.long() <= _INT_MAX:
                raise self.fail("an int out of the 32-bit range")
        elif name == "long":
            self.long()
        elif name == "float":
            self.skip(4)
        elif name == "double":
            self.skip(8)
        elif name in ("string", "bytes"):
            self.skip(self.length())
        elif name in self.names:
            self.value(self.names[name])
        else:
            raise ConfigError(f"{self.kind}: the bounds check does not know type {name!r}")


def check_bounds(schema: Any, data: bytes | bytearray | memoryview, start: int, bounds: Bounds,
                 kind: str) -> None:
    """Raise :class:`RpcMessageError` unless ``data[start:]`` is one well-formed
    Avro value of ``schema`` within ``bounds`` with no trailing bytes."""
    scan = _Scan(data, start, bounds, kind)
    scan.value(schema)
    if scan.pos != len(data):
        raise scan.fail(f"{len(data) - scan.pos} trailing bytes after the message")
