"""How one WAL record is laid out in Kafka records (versioned Avro frames).

A record of N bytes becomes ``ceil(N / chunk_bytes)`` frames (at least one), each a
Kafka record value ``b"WSWF" + version + Avro{chunk_index, chunk_count,
total_length, crc32, data}``. The CRC covers the whole record, so a reassembly
from mismatched chunks is caught. Frames of one record are produced back to back
to one partition by one idempotent producer, so their offsets are consecutive.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from walstream.avro_codec import VersionedCodec, avro_long
from walstream.errors import CorruptDataError, UnknownSchemaVersionError
from walstream.wal.config import KafkaWalConfig
from walstream.wal.errors import CorruptRecordError, TornRecordError, UnknownRecordVersionError

FRAME_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "WalFrame",
    "namespace": "walstream.wal.v1",
    "fields": [
        {"name": "chunk_index", "type": "int"},
        {"name": "chunk_count", "type": "int"},
        {"name": "total_length", "type": "long"},
        {"name": "crc32", "type": "long"},
        {"name": "data", "type": "bytes"},
    ],
}

log = logging.getLogger(__name__)

#: The default bound on a whole record, read and written (``KafkaWalConfig``'s).
DEFAULT_MAX_RECORD_BYTES: int = KafkaWalConfig.max_record_bytes
#: The largest chunk a writer makes (``KafkaWalConfig``'s bound on ``chunk_bytes``).
MAX_CHUNK_BYTES = 64 * 1024 * 1024
#: Magic, version and the five Avro fields' varints around a chunk (at most 56 bytes).
MAX_FRAME_OVERHEAD = 64

FRAME_CODEC = VersionedCodec("WAL frame", b"WSWF", {1: FRAME_SCHEMA_V1})


@dataclass(frozen=True)
class Frame:
    chunk_index: int
    chunk_count: int
    total_length: int
    crc32: int
    data: bytes


_FRAME_PREFIX = FRAME_CODEC.magic + bytes((1,))


def encode_record(record: bytes, chunk_bytes: int) -> list[bytes]:
    """Split ``record`` into encoded frames of at most ``chunk_bytes`` payload each.

    Writes the v1 Avro layout directly (header varints + the chunk), which is
    byte-identical to ``FRAME_CODEC.encode`` (a test checks it) but copies each
    chunk once instead of three times, which fastavro's encoder does
    (docs/decisions/hand-laid-avro-encoders.md).
    """
    crc = zlib.crc32(record)
    n = max(1, -(-len(record) // chunk_bytes))
    view = memoryview(record)
    common = avro_long(n) + avro_long(len(record)) + avro_long(crc)
    frames = []
    for i in range(n):
        chunk = view[i * chunk_bytes : (i + 1) * chunk_bytes]
        frames.append(b"".join((_FRAME_PREFIX, avro_long(i), common, avro_long(len(chunk)), chunk)))
    return frames


def decode_frame(value: bytes | None, where: str,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Frame:
    """Decode one Kafka record value; typed errors name ``where`` it was found.

    Guarantees on a returned frame: ``0 <= chunk_index < chunk_count``,
    ``0 <= total_length <= max_record_bytes``, ``chunk_count <= max(1,
    total_length)`` (every chunk but an empty record's one holds a byte) and
    ``len(data) <= total_length``, so a reassembly never holds more than
    ``max_record_bytes``. A value longer than any frame a writer makes is
    refused before it is decoded. Anything else raises
    :class:`CorruptRecordError` (:class:`UnknownRecordVersionError` for a
    version this release does not know).
    """
    if value is None:
        raise CorruptRecordError(f"{where}: empty (null) record value, not a WAL frame")
    limit = min(max_record_bytes, MAX_CHUNK_BYTES) + MAX_FRAME_OVERHEAD
    if isinstance(value, bytes | bytearray | memoryview) and len(value) > limit:
        raise CorruptRecordError(f"{where}: {len(value)} bytes, larger than any frame "
                                 f"({limit} bytes for max_record_bytes={max_record_bytes})")
    try:
        _, d = FRAME_CODEC.decode(value)
    except UnknownSchemaVersionError as exc:
        raise UnknownRecordVersionError(f"{where}: {exc}", exc.version) from exc
    except CorruptDataError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
    frame = Frame(d["chunk_index"], d["chunk_count"], d["total_length"], d["crc32"], d["data"])
    if not 0 <= frame.chunk_index < frame.chunk_count:
        raise CorruptRecordError(f"{where}: chunk {frame.chunk_index} of {frame.chunk_count}")
    if not 0 <= frame.total_length <= max_record_bytes:
        raise CorruptRecordError(f"{where}: record length {frame.total_length} outside "
                                 f"[0, max_record_bytes={max_record_bytes}]")
    if frame.chunk_count > max(1, frame.total_length):
        raise CorruptRecordError(f"{where}: {frame.chunk_count} chunks for a record of "
                                 f"{frame.total_length} bytes")
    if len(frame.data) > frame.total_length:
        raise CorruptRecordError(f"{where}: chunk of {len(frame.data)} bytes in a record of "
                                 f"{frame.total_length}")
    return frame


TornHandler = Callable[[TornRecordError], None]


def _log_torn(err: TornRecordError) -> None:
    log.warning("WAL: skipping a torn record (its write never returned): %s", err)


class Reassembler:
    """Joins consecutive frames into records, reporting broken sequences.

    A frame with ``chunk_index == 0`` always starts a record: when it arrives
    while another record is incomplete, that record is torn (its writer died
    between chunks, so its write never returned). The torn record is reported to
    ``on_torn`` (default: a warning) and dropped, and the new record is
    assembled, so an acknowledged record written after a crash is never lost.
    Any other frame that does not continue the pending record raises.
    Memory: at most one record's ``total_length`` bytes, bounded by
    :func:`decode_frame`.
    """

    def __init__(self, on_torn: TornHandler | None = None) -> None:
        self._parts: list[Frame] = []
        self._size = 0
        self._start = ""
        self._on_torn = on_torn or _log_torn

    @property
    def pending(self) -> bool:
        return bool(self._parts)

    def reset(self) -> str:
        """Drop an incomplete record; return where it started (for the report)."""
        start, self._parts, self._start, self._size = self._start, [], "", 0
        return start

    def feed(self, frame: Frame, where: str) -> bytes | None:
        """Add a frame; return the whole record when its last chunk arrives.

        Raises :class:`CorruptRecordError` when a frame other than a first chunk
        does not continue the record being assembled (the partial record is
        dropped first), or when a whole record fails its length/CRC check.
        """
        if self._parts:
            head = self._parts[0]
            if frame.chunk_index == 0:
                # Reset before reporting: a handler that raises (strict reads)
                # leaves no stale partial record behind.
                got, start = len(self._parts), self.reset()
                self._on_torn(TornRecordError(
                    f"{start}: chunked record torn after {got} of {head.chunk_count} chunks; "
                    f"a new record starts at {where}"))
            elif (
                frame.chunk_index != len(self._parts)
                or frame.chunk_count != head.chunk_count
                or frame.total_length != head.total_length
                or frame.crc32 != head.crc32
                or self._size + len(frame.data) > head.total_length
            ):
                start = self.reset()
                raise CorruptRecordError(f"{where}: breaks the chunked record started at {start}")
        elif frame.chunk_index != 0:
            raise CorruptRecordError(
                f"{where}: chunk {frame.chunk_index} of {frame.chunk_count} without its start"
            )
        if not self._parts:
            self._start = where
        self._parts.append(frame)
        self._size += len(frame.data)
        if len(self._parts) < frame.chunk_count:
            return None
        parts, start = self._parts, self._start
        self.reset()
        record = b"".join(p.data for p in parts)
        if len(record) != parts[0].total_length or zlib.crc32(record) != parts[0].crc32:
            raise CorruptRecordError(f"{start}: record fails its length/CRC check")
        return record
