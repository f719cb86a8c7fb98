"""Unit tests of the WAL's versioned frames (no broker)."""

from __future__ import annotations

import pytest

from wal.errors import CorruptRecordError, UnknownRecordVersionError
from wal.framing import FRAME_CODEC, Reassembler, decode_frame, encode_record


def _join(frames: list[bytes]) -> bytes:
    asm = Reassembler()
    out = None
    for i, f in enumerate(frames):
        out = asm.feed(decode_frame(f, f"f{i}"), f"f{i}")
    assert out is not None
    return out


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 10_000])
def test_round_trip_splits_into_chunks(size: int) -> None:
    record = bytes(range(256)) * (size // 256) + bytes(size % 256)
    frames = encode_record(record, chunk_bytes=1024)
    assert len(frames) == max(1, -(-size // 1024))
    assert _join(frames) == record


def test_foreign_bytes_are_a_typed_error() -> None:
    with pytest.raises(CorruptRecordError, match="bad magic"):
        decode_frame(b"hello world", "topic@3")
    with pytest.raises(CorruptRecordError, match="null"):
        decode_frame(None, "topic@4")


def test_unknown_version_names_the_version() -> None:
    frame = bytearray(encode_record(b"abc", 1024)[0])
    frame[len(FRAME_CODEC.magic)] = 7
    with pytest.raises(UnknownRecordVersionError, match="unknown schema version 7") as info:
        decode_frame(bytes(frame), "topic@0")
    assert info.value.version == 7


def test_truncated_body_is_corrupt() -> None:
    frame = encode_record(b"x" * 100, 1024)[0]
    with pytest.raises(CorruptRecordError):
        decode_frame(frame[:-10], "topic@0")


def test_crc_catches_a_flipped_byte() -> None:
    frames = encode_record(b"y" * 3000, 1024)
    asm = Reassembler()
    bad = bytearray(frames[1])
    bad[-1] ^= 0xFF
    asm.feed(decode_frame(frames[0], "a"), "a")
    asm.feed(decode_frame(bytes(bad), "b"), "b")
    with pytest.raises(CorruptRecordError, match="CRC"):
        asm.feed(decode_frame(frames[2], "c"), "c")


def test_interleaved_chunks_are_reported() -> None:
    a = encode_record(b"a" * 3000, 1024)
    b = encode_record(b"b" * 3000, 1024)
    asm = Reassembler()
    asm.feed(decode_frame(a[0], "a0"), "a0")
    with pytest.raises(CorruptRecordError, match="breaks the chunked record"):
        asm.feed(decode_frame(b[1], "b1"), "b1")
    assert not asm.pending


@pytest.mark.parametrize("size", [0, 200, 65_536, 1_048_576, 3 * 1_048_576 + 7])
def test_fast_encoder_matches_the_avro_codec(size: int) -> None:
    import zlib

    record = bytes(i % 251 for i in range(size))
    chunk = 512 * 1024
    frames = encode_record(record, chunk)
    n = len(frames)
    for i, f in enumerate(frames):
        expected = FRAME_CODEC.encode({
            "chunk_index": i, "chunk_count": n, "total_length": size,
            "crc32": zlib.crc32(record), "data": record[i * chunk:(i + 1) * chunk]})
        assert f == expected
