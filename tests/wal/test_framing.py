"""Unit tests of the WAL's versioned frames (no broker)."""

from __future__ import annotations

import pytest

from walstream.wal.errors import CorruptRecordError, TornRecordError, UnknownRecordVersionError
from walstream.wal.framing import FRAME_CODEC, Reassembler, decode_frame, encode_record


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


def test_torn_chunked_record_does_not_drop_the_next_record() -> None:
    """A writer died after chunk 0 of ``torn``; the next writer's records all come back."""
    torn = encode_record(b"t" * 3000, 1024)
    single = encode_record(b"next", 1024)
    multi = encode_record(b"m" * 2500, 1024)
    asm = Reassembler()
    assert asm.feed(decode_frame(torn[0], "s@0"), "s@0") is None
    assert asm.feed(decode_frame(single[0], "s@1"), "s@1") == b"next"
    assert not asm.pending
    # A torn record followed by a multi-chunk record: that record is rebuilt whole.
    asm.feed(decode_frame(torn[0], "s@2"), "s@2")
    asm.feed(decode_frame(torn[1], "s@3"), "s@3")
    out = [asm.feed(decode_frame(f, f"s@{4 + i}"), f"s@{4 + i}") for i, f in enumerate(multi)]
    assert out == [None, None, b"m" * 2500]


def test_torn_chunked_record_is_reported_with_where_it_started() -> None:
    torn = encode_record(b"t" * 3000, 1024)
    reports: list[CorruptRecordError] = []
    asm = Reassembler(on_torn=reports.append)
    asm.feed(decode_frame(torn[0], "s@7"), "s@7")
    asm.feed(decode_frame(torn[1], "s@8"), "s@8")
    assert asm.feed(decode_frame(encode_record(b"x", 1024)[0], "s@9"), "s@9") == b"x"
    assert len(reports) == 1
    assert isinstance(reports[0], TornRecordError)
    assert "s@7" in str(reports[0]) and "2 of 3 chunks" in str(reports[0])


def _frame(chunk_index: int, chunk_count: int, total_length: int, data: bytes) -> bytes:
    return FRAME_CODEC.encode({"chunk_index": chunk_index, "chunk_count": chunk_count,
                               "total_length": total_length, "crc32": 0, "data": data})


@pytest.mark.parametrize(
    ("chunk_count", "total_length", "data", "match"),
    [
        (1, 2**40, b"x", "record length"),  # above the default max_record_bytes
        (1, -1, b"", "record length"),
        (2**31 - 1, 10, b"x", "chunks for a record of 10 bytes"),
        (1, 3, b"four", "chunk of 4 bytes"),
    ],
)
def test_frame_declaring_more_than_max_record_bytes_is_corrupt(
    chunk_count: int, total_length: int, data: bytes, match: str
) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        decode_frame(_frame(0, chunk_count, total_length, data), "s@0")


def test_frame_bounds_follow_the_readers_max_record_bytes() -> None:
    frame = _frame(0, 2, 5000, b"y" * 2500)
    assert decode_frame(frame, "s@0", max_record_bytes=5000).total_length == 5000
    with pytest.raises(CorruptRecordError, match="max_record_bytes=4999"):
        decode_frame(frame, "s@0", max_record_bytes=4999)
    with pytest.raises(CorruptRecordError, match="larger than any frame"):
        decode_frame(frame, "s@0", max_record_bytes=1000)  # longer than any 1000-byte frame


def test_chunks_adding_up_beyond_the_declared_length_are_refused() -> None:
    asm = Reassembler()
    asm.feed(decode_frame(_frame(0, 3, 5, b"abc"), "s@0"), "s@0")
    with pytest.raises(CorruptRecordError, match="breaks the chunked record"):
        asm.feed(decode_frame(_frame(1, 3, 5, b"def"), "s@1"), "s@1")
    assert not asm.pending
