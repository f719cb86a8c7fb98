"""Versioned Avro envelopes: ``MAGIC + version byte + Avro (schemaless) body``.

Every record this project stores (WAL frames, batched WAL groups, tracker events,
checkpoint data) goes through a :class:`VersionedCodec`. The magic prefix makes
foreign bytes fail fast with :class:`CorruptDataError`; the version byte lets an
old reader refuse data from a newer writer with :class:`UnknownSchemaVersionError`
(naming the version) instead of misreading it. Never pickle: the format must stay
readable across code changes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import fastavro

from walstream.errors import ConfigError, CorruptDataError, UnknownSchemaVersionError


# Avro's zig-zag varint of an int/long, hand-written for the hot paths that lay
# out Avro binary themselves (WAL frames, received items, blocks): fastavro's
# writer costs microseconds per call. Each such layout has a test checking it is
# byte-identical to fastavro's encoding of its schema.
def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


#: ``avro_long(n)`` for ``0 <= n < len(AVRO_LENGTHS)``: the length prefixes of the
#: records of a block, looked up rather than computed once per record.
AVRO_LENGTHS: tuple[bytes, ...] = tuple(_varint(n) for n in range(1 << 13))


def avro_long(n: int) -> bytes:
    """Avro binary of the long ``n`` (zig-zag varint)."""
    if 0 <= n < len(AVRO_LENGTHS):
        return AVRO_LENGTHS[n]
    return _varint(n)


def _min_width(schema: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()) -> int:
    """The fewest bytes one value of ``schema`` takes in Avro binary (0 or more).

    Raises :class:`ConfigError` for an array whose items can take no bytes (a
    2**62 count of them would decode forever from a few bytes) and for a
    recursive record (nesting bounded only by the input).
    """
    if isinstance(schema, list):  # a union: its branch index is at least one byte
        for branch in schema:
            _min_width(branch, named, seen)
        return 1
    if isinstance(schema, str):
        if schema in named:
            if schema in seen:
                raise ConfigError(f"recursive Avro type {schema!r}: decoding depth unbounded")
            return _min_width(named[schema], named, seen | {schema})
        return 0 if schema == "null" else 1
    kind = schema["type"]
    if kind == "record":
        name = schema.get("name", "")
        named.setdefault(name, schema)
        inner = seen | {name}
        return sum(_min_width(f["type"], named, inner) for f in schema["fields"])
    if kind == "array":
        if _min_width(schema["items"], named, seen) == 0:
            raise ConfigError("an Avro array of zero-width items: decoding time unbounded")
        return 1
    if kind == "map":
        _min_width(schema["values"], named, seen)
        return 1
    if kind == "fixed":
        named.setdefault(schema.get("name", ""), schema)
        return int(schema["size"])
    if kind == "enum":
        named.setdefault(schema.get("name", ""), schema)
        return 1
    return _min_width(kind, named, seen)  # {"type": "long"} and the like


class VersionedCodec:
    """Encode/decode one kind of record with a magic prefix and a schema version.

    ``schemas`` maps version numbers (1..255) to Avro schemas; new data is written
    with the highest version, and every known version can be read. ``max_bytes``
    (None: no bound) is the largest input :meth:`decode` accepts.
    """

    def __init__(self, kind: str, magic: bytes, schemas: Mapping[int, dict[str, Any]],
                 max_bytes: int | None = None) -> None:
        if not magic or len(magic) > 8:
            raise ConfigError(f"{kind}: magic must be 1..8 bytes, got {magic!r}")
        if not schemas or any(not 1 <= v <= 255 for v in schemas):
            raise ConfigError(f"{kind}: schema versions must be 1..255")
        self.kind = kind
        self.magic = magic
        self._parsed = {v: fastavro.parse_schema(s) for v, s in schemas.items()}
        for parsed in self._parsed.values():
            _min_width(parsed, {})
        self.latest = max(self._parsed)
        self.known = tuple(sorted(self._parsed))
        self.max_bytes = max_bytes

    def encode(self, datum: Mapping[str, Any], version: int | None = None) -> bytes:
        version = self.latest if version is None else version
        schema = self._parsed.get(version)
        if schema is None:
            raise UnknownSchemaVersionError(self.kind, version, self.known)
        buf = io.BytesIO()
        buf.write(self.magic)
        buf.write(bytes((version,)))
        fastavro.schemaless_writer(buf, schema, datum)
        return buf.getvalue()

    def peek_version(self, data: bytes | bytearray | memoryview) -> int:
        """Return the version byte, raising if the magic prefix is not ours."""
        n = len(self.magic)
        if len(data) < n + 1 or data[:n] != self.magic:
            raise CorruptDataError(
                f"{self.kind}: not a {self.kind} record (bad magic {bytes(data[:n])!r}, "
                f"length {len(data)})"
            )
        return data[n]

    def decode(self, data: bytes | bytearray | memoryview,
               max_bytes: int | None = None) -> tuple[int, dict[str, Any]]:
        """Return ``(version, datum)``; raise a typed error on foreign or corrupt bytes.

        Any input gets a value or :class:`CorruptDataError` (its subclass
        :class:`UnknownSchemaVersionError` for a version this code does not
        know), never another exception: input that is not bytes-like, or is
        longer than ``max_bytes`` (default: the codec's), is refused before
        decoding. Time and memory are linear in ``len(data)``: every Avro
        length and count is checked against the bytes actually present (a
        declared length of 2**62 fails at the end of the input, allocating
        nothing), and the schemas hold no recursive or zero-width types that
        could repeat without consuming input.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptDataError(f"{self.kind}: a {type(data).__name__} is not bytes")
        limit = self.max_bytes if max_bytes is None else max_bytes
        if limit is not None and len(data) > limit:
            raise CorruptDataError(f"{self.kind}: {len(data)} bytes (max {limit}); not decoded")
        version = self.peek_version(data)
        schema = self._parsed.get(version)
        if schema is None:
            raise UnknownSchemaVersionError(self.kind, version, self.known)
        buf = io.BytesIO(data)
        buf.seek(len(self.magic) + 1)
        try:
            datum = fastavro.schemaless_reader(buf, schema, None)
        except Exception as exc:  # fastavro raises many types on garbage input
            raise CorruptDataError(f"{self.kind} v{version}: body does not decode: {exc}") from exc
        if buf.tell() != len(data):
            raise CorruptDataError(
                f"{self.kind} v{version}: {len(data) - buf.tell()} trailing bytes after the record"
            )
        if not isinstance(datum, dict):
            raise CorruptDataError(f"{self.kind} v{version}: body is not a record")
        return version, datum
