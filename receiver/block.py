"""A block: the unit a receiver stores in its WAL and reports to the driver.

Stored as a versioned Avro envelope (never pickle) holding the stream id, the
block id, the records (bytes) and the source ranges they came from, so a PySpark
task can decode a block with no user code and a Kafka receiver can resume from
the exact source positions the driver acknowledged.

Three versions, all written and all read:

- v1 holds any items, as an array of their encodings (:mod:`walstream.receiver.items`).
- v2 holds a block whose items are all ``str`` with no newline in them (what
  text receivers store: lines): their UTF-8 joined by newlines, and their count.
  A task gets the block's lines with one decode and one split, instead of
  decoding an array and then each item (:func:`block_items`), and the receiver
  lays it out with a few bulk byte operations. The count is checked against
  the lines found, so a block that lost or gained a newline is corrupt, never
  read as other lines.
- v3 is v2 for a block whose items are all ``(None, str)`` pairs (Kafka records
  with no key, what Kafka receivers mostly store): the values' UTF-8 joined by
  newlines, and their count. A task gets the pairs with one strict decode, one
  split and one zip.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from walstream.avro_codec import AVRO_LENGTHS, VersionedCodec, avro_long
from walstream.errors import CorruptDataError
from walstream.receiver.errors import CorruptItemError
from walstream.receiver.items import STR_TAG, VALUE_TAG, decode_items
from walstream.receiver.text_run import TextRun
from walstream.rpc.schemas import SOURCE_RANGE_SCHEMA
from walstream.wal.framing import DEFAULT_MAX_RECORD_BYTES

BLOCK_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "Block",
    "namespace": "walstream.receiver.v1",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "block_id", "type": "string"},
        {"name": "records", "type": {"type": "array", "items": "bytes"}},
        {"name": "source", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
    ],
}

def _text_schema(version: int) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Block",
        "namespace": f"walstream.receiver.v{version}",
        "fields": [
            {"name": "stream_id", "type": "int"},
            {"name": "block_id", "type": "string"},
            {"name": "count", "type": "long"},
            {"name": "text", "type": "bytes"},
            {"name": "source", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
        ],
    }


#: ``str`` items joined (v2), ``(None, str)`` items' values joined (v3).
BLOCK_SCHEMA_V2: dict[str, Any] = _text_schema(2)
BLOCK_SCHEMA_V3: dict[str, Any] = _text_schema(3)

#: The largest block decoded: a block is one WAL record, never above the WAL's
#: default ``max_record_bytes`` (pass the writer's to ``Block.decode`` if raised).
MAX_BLOCK_BYTES = DEFAULT_MAX_RECORD_BYTES
BLOCK_CODEC = VersionedCodec(
    "block", b"WSBK", {1: BLOCK_SCHEMA_V1, 2: BLOCK_SCHEMA_V2, 3: BLOCK_SCHEMA_V3},
    max_bytes=MAX_BLOCK_BYTES)
_BLOCK_PREFIX = {v: BLOCK_CODEC.magic + bytes((v,)) for v in (1, 2, 3)}
_FIRST_BYTE = operator.itemgetter(0)
#: The text versions by the one tag all of a block's items must have.
_TEXT_VERSIONS = {STR_TAG[0]: 2, VALUE_TAG[0]: 3}
_TAG_OF_VERSION = {version: bytes((tag,)) for tag, version in _TEXT_VERSIONS.items()}


def joined_text(records: Sequence[bytes]) -> tuple[int, bytes] | None:
    """The text version (2 or 3) of ``records`` (item encodings) and its ``text``:
    their bodies (UTF-8) joined by newlines; None unless there is at least one
    record, every one has the same tag, ``s`` (``str`` items: v2) or ``v``
    (``(None, str)`` items: v3), and no body holds a newline.

    A few bulk operations in C rather than a Python step per record: the set of
    the records' first bytes has one member only if every record has that tag,
    and their bodies joined by newlines hold exactly ``n - 1`` newlines only if
    no body holds one of its own. A newline byte never occurs inside a
    multi-byte UTF-8 sequence, so the split on read gives back exactly these
    items.
    """
    n = len(records)
    if n == 0:
        return None
    try:
        tags = set(map(_FIRST_BYTE, records))
    except IndexError:  # an empty record: not an item
        return None
    version = _TEXT_VERSIONS.get(tags.pop()) if len(tags) == 1 else None
    if version is None:
        return None
    text = b"\n".join([r[1:] for r in records])
    return (version, text) if text.count(b"\n") == n - 1 else None


def _avro_bytes_array(items: list[bytes]) -> list[bytes]:
    """Parts of Avro's binary array of ``bytes``: one block of ``len(items)``, then 0."""
    if not items:
        return [b"\x00"]
    # The usual record's length prefix is looked up, not computed.
    fits = max(map(len, items)) < len(AVRO_LENGTHS)
    prefix = AVRO_LENGTHS.__getitem__ if fits else avro_long
    parts = [avro_long(len(items))]
    parts += [p for item in items for p in (prefix(len(item)), item)]
    parts.append(b"\x00")
    return parts


def _avro_string(s: str) -> bytes:
    data = s.encode("utf-8")
    return avro_long(len(data)) + data


@dataclass(frozen=True, order=True)
class SourceRange:
    """Offsets ``[from_offset, until_offset)`` of one source topic partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from_offset": self.from_offset,
            "until_offset": self.until_offset,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceRange:
        return cls(d["topic"], int(d["partition"]), int(d["from_offset"]), int(d["until_offset"]))


@dataclass(frozen=True)
class Block:
    stream_id: int
    block_id: str
    records: Sequence[bytes]
    source: tuple[SourceRange, ...] = field(default=())

    def encode(self) -> bytes:
        """``BLOCK_CODEC.encode`` of the v2 or v3 record when :func:`joined_text`
        gives the records' text, else of the v1 record; laid out by hand.

        Byte-identical to fastavro's encoding (tests/receiver/test_block.py checks
        it), but one join of the records instead of fastavro growing a buffer
        record by record, on the receiver's pushing thread
        (docs/decisions/hand-laid-avro-encoders.md). A record that
        is not bytes fails the join with ``TypeError``, as it failed fastavro.
        A :class:`~walstream.receiver.text_run.TextRun`'s chunks go into the one join as
        they are: its text is never built apart.
        """
        records = self.records
        head = [avro_long(self.stream_id), _avro_string(self.block_id)]
        if isinstance(records, TextRun):
            text_parts = records.text_parts()
            text_len = records.body_bytes + records.length - 1
            parts = [_BLOCK_PREFIX[_TEXT_VERSIONS[records.tag[0]]], *head,
                     avro_long(records.length), avro_long(text_len), *text_parts]
        elif (joined := joined_text(records)) is not None:
            version, text = joined
            parts = [_BLOCK_PREFIX[version], *head, avro_long(len(records)),
                     avro_long(len(text)), text]
        else:
            parts = [_BLOCK_PREFIX[1], *head, *_avro_bytes_array(list(records))]
        if self.source:
            parts.append(avro_long(len(self.source)))
            for r in self.source:
                parts += (_avro_string(r.topic), avro_long(r.partition),
                          avro_long(r.from_offset), avro_long(r.until_offset))
        parts.append(b"\x00")
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes, max_bytes: int = MAX_BLOCK_BYTES) -> Block:
        """Decode a stored block; any other input raises ``CorruptDataError`` (or
        ``UnknownSchemaVersionError``), never another exception type. Input
        above ``max_bytes`` is refused before decoding."""
        version, d = BLOCK_CODEC.decode(data, max_bytes)
        if version == 1:
            records = list(d["records"])
        else:
            tag = _TAG_OF_VERSION[version]
            records = [tag + line for line in _split_text(version, d).split(b"\n")]
        return cls(
            d["stream_id"],
            d["block_id"],
            records,
            tuple(SourceRange.from_dict(s) for s in d["source"]),
        )


def _split_text(version: int, d: dict[str, Any]) -> bytes:
    """A decoded v2 or v3 record's text, once its newlines agree with its count."""
    text: bytes = d["text"]
    count = d["count"]
    lines = text.count(b"\n") + 1
    if lines != count:
        raise CorruptDataError(
            f"block v{version}: {lines} lines in its text, but a count of {count}")
    return text


def block_items(data: bytes, max_bytes: int = MAX_BLOCK_BYTES) -> list[Any]:
    """The items of a stored block, in order (what a batch's task reads).

    A v2 block's lines come from one strict UTF-8 decode (``surrogatepass``, as
    ``str`` items are stored) and one split, a v3 block's pairs from one strict
    decode, one split and one zip with ``None`` keys; a v1 block's items from
    :func:`~walstream.receiver.items.decode_items`. Raises what :meth:`Block.decode` and
    ``decode_items`` raise for bytes that are not a block of valid items
    (``CorruptDataError`` and its subclasses), never another exception type.
    """
    version, d = BLOCK_CODEC.decode(data, max_bytes)
    if version == 1:
        return decode_items(d["records"])
    text = _split_text(version, d)
    try:
        if version == 2:
            return text.decode("utf-8", "surrogatepass").split("\n")
        # (None, str) pairs hold strictly valid UTF-8, as a pair's strings do.
        return list(zip(repeat(None), text.decode("utf-8").split("\n")))
    except UnicodeDecodeError as exc:
        raise CorruptItemError(f"block v{version}: its text is not valid UTF-8: {exc}") from exc
