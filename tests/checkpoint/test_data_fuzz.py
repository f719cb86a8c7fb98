"""Fuzz of the checkpoint decoder: every input raises CorruptCheckpointError or decodes."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.data import CODEC, CheckpointData
from checkpoint.errors import CorruptCheckpointError
from tests.checkpoint.helpers import make_data
from tests.walstream.fuzz_checks import (
    FUZZ,
    WRONG_TYPES,
    decodes_or_typed_error,
    garbage,
    huge_lengths,
    truncations,
)
from walstream.avro_codec import avro_long

VALID = make_data(5000).encode()
PREFIX = CODEC.magic + bytes((CODEC.latest,))


def _with_crc(body: bytes) -> bytes:
    """A file whose CRC is right, so the decoder gets past it to the Avro body."""
    return body + zlib.crc32(body).to_bytes(4, "big")


@FUZZ
@given(garbage)
def test_random_bytes_raise_a_typed_error(data: bytes) -> None:
    decodes_or_typed_error(CheckpointData.decode, data)


@FUZZ
@given(garbage)
def test_a_valid_envelope_and_crc_around_a_garbage_body_raise_a_typed_error(body: bytes) -> None:
    decodes_or_typed_error(CheckpointData.decode, _with_crc(PREFIX + body))


def test_every_truncation_of_a_valid_checkpoint_raises_a_typed_error() -> None:
    body = VALID[:-4]
    for cut in truncations(VALID):
        with pytest.raises(CorruptCheckpointError):
            CheckpointData.decode(cut)
    for cut in truncations(body):  # with a right CRC: the Avro decoder itself must refuse
        with pytest.raises(CorruptCheckpointError):
            CheckpointData.decode(_with_crc(cut))


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


@pytest.mark.parametrize("wrong", WRONG_TYPES, ids=lambda w: type(w).__name__)
def test_input_of_the_wrong_type_raises_a_typed_error(wrong: object) -> None:
    with pytest.raises(CorruptCheckpointError, match="not bytes"):
        CheckpointData.decode(wrong)  # type: ignore[arg-type]


def test_a_file_above_max_bytes_is_refused_before_decoding() -> None:
    from checkpoint.data import MAX_CHECKPOINT_BYTES

    assert CODEC.max_bytes == MAX_CHECKPOINT_BYTES
    with pytest.raises(CorruptCheckpointError, match=f"max {len(VALID) - 1}"):
        CheckpointData.decode(VALID, "cp", max_bytes=len(VALID) - 1)
    assert CheckpointData.decode(memoryview(VALID)) == make_data(5000)


@FUZZ
@given(st.integers(min_value=0, max_value=len(VALID) - 5), st.integers(0, 255))
def test_a_flipped_byte_under_a_right_crc_decodes_or_raises_a_typed_error(pos: int,
                                                                         value: int) -> None:
    body = bytearray(VALID[:-4])
    body[pos] = value
    decodes_or_typed_error(CheckpointData.decode, _with_crc(bytes(body)))
