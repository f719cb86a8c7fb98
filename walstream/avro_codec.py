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
_SMALL_LONGS = [bytes((n << 1,)) for n in range(64)]


def avro_long(n: int) -> bytes:
    """Avro binary of the long ``n`` (zig-zag varint)."""
    if 0 <= n < 64:
        return _SMALL_LONGS[n]
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class VersionedCodec:
    """Encode/decode one kind of record with a magic prefix and a schema version.

    ``schemas`` maps version numbers (1..255) to Avro schemas; new data is written
    with the highest version, and every known version can be read.
    """

    def __init__(self, kind: str, magic: bytes, schemas: Mapping[int, dict[str, Any]]) -> None:
        if not magic or len(magic) > 8:
            raise ConfigError(f"{kind}: magic must be 1..8 bytes, got {magic!r}")
        if not schemas or any(not 1 <= v <= 255 for v in schemas):
            raise ConfigError(f"{kind}: schema versions must be 1..255")
        self.kind = kind
        self.magic = magic
        self._parsed = {v: fastavro.parse_schema(s) for v, s in schemas.items()}
        self.latest = max(self._parsed)
        self.known = tuple(sorted(self._parsed))

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

    def peek_version(self, data: bytes) -> int:
        """Return the version byte, raising if the magic prefix is not ours."""
        n = len(self.magic)
        if len(data) < n + 1 or data[:n] != self.magic:
            raise CorruptDataError(
                f"{self.kind}: not a {self.kind} record (bad magic {bytes(data[:n])!r}, "
                f"length {len(data)})"
            )
        return data[n]

    def decode(self, data: bytes) -> tuple[int, dict[str, Any]]:
        """Return ``(version, datum)``; raise a typed error on foreign or corrupt bytes."""
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
