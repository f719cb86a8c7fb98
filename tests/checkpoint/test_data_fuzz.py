"""Fuzz of the checkpoint decoder: every input raises CorruptCheckpointError or decodes."""

from __future__ import annotations

import zlib

import pytest

from tests.checkpoint.helpers import make_data
from tests.walstream.fuzz_checks import (
    FlippedBytes,
    TruncationsRaise,
    decodes_or_typed_error,
    huge_lengths,
)
from walstream.avro_codec import avro_long
from walstream.checkpoint.data import CODEC, CheckpointData
from walstream.checkpoint.errors import CorruptCheckpointError

VALID = make_data(5000).encode()
PREFIX = CODEC.magic + bytes((CODEC.latest,))


def _with_crc(body: bytes) -> bytes:
    """A file whose CRC is right, so the decoder gets past it to the Avro body."""
    return body + zlib.crc32(body).to_bytes(4, "big")


class TestCheckpointDecoder(TruncationsRaise, FlippedBytes):
    """The contract's bodies get a right CRC, so the Avro decoder itself is fuzzed;
    truncations cut the whole file, and also the body under a right CRC."""

    decode = staticmethod(CheckpointData.decode)
    error = CorruptCheckpointError
    valid = {"checkpoint": VALID[:-4]}  # the Avro body: wrap(body) == VALID
    prefixes = (PREFIX,)
    wrap = staticmethod(_with_crc)


def test_huge_declared_lengths_raise_without_allocating() -> None:
    longs = b"".join(avro_long(n) for n in (5000, 1, 1000, 0))  # times, wall, batch, zero
    cases = [
        *huge_lengths(PREFIX + avro_long(5000) + avro_long(1)),  # the app id's length
        *huge_lengths(PREFIX + longs[:3] + b"\x02a" + longs[3:]),  # fingerprint's length
        *huge_lengths(PREFIX + longs[:3] + b"\x02a" + longs[3:] + b"\x02f"),  # graph shape
        *huge_lengths(PREFIX + longs[:3] + b"\x02a" + longs[3:] + b"\x02f\x00"),  # pending
        *huge_lengths(PREFIX + longs[:3] + b"\x02a" + longs[3:] + b"\x02f\x00\x00\x00"),
    ]
    for data in cases:
        assert decodes_or_typed_error(CheckpointData.decode, _with_crc(data)) is None


def test_a_file_above_max_bytes_is_refused_before_decoding() -> None:
    from walstream.checkpoint.data import MAX_CHECKPOINT_BYTES

    assert CODEC.max_bytes == MAX_CHECKPOINT_BYTES
    with pytest.raises(CorruptCheckpointError, match=f"max {len(VALID) - 1}"):
        CheckpointData.decode(VALID, "cp", max_bytes=len(VALID) - 1)
    assert CheckpointData.decode(memoryview(VALID)) == make_data(5000)
