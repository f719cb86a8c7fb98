"""CheckpointData: round trip, CRC, foreign bytes and schema versions."""

from __future__ import annotations

import zlib

import pytest

from tests.checkpoint.helpers import make_data
from walstream.avro_codec import VersionedCodec
from walstream.checkpoint.data import CODEC, SCHEMA_V1, CheckpointData
from walstream.checkpoint.errors import (
    CheckpointError,
    CheckpointWriteError,
    CorruptCheckpointError,
)


def test_round_trip_keeps_every_field() -> None:
    data = make_data(5000, pending_times_ms=(3000, 4000, 5000))
    assert CheckpointData.decode(data.encode()) == data


def test_round_trip_of_empty_collections() -> None:
    data = make_data(1000, graph_shape=(), pending_times_ms=(), state_rdds=(), conf={})
    assert CheckpointData.decode(data.encode()) == data


def test_encoding_is_deterministic() -> None:
    assert make_data(2000).encode() == make_data(2000).encode()


@pytest.mark.parametrize("cut", [1, 4, 5, 20])
def test_crc_detects_truncation(cut: int) -> None:
    raw = make_data().encode()
    with pytest.raises(CorruptCheckpointError, match="CRC mismatch"):
        CheckpointData.decode(raw[:-cut], "ckpt-file")


def test_too_short_is_corrupt() -> None:
    with pytest.raises(CorruptCheckpointError, match="too short"):
        CheckpointData.decode(b"WSCP\x01", "ckpt-file")


def test_crc_detects_a_flipped_byte_anywhere() -> None:
    raw = make_data().encode()
    for i in range(len(raw)):
        flipped = bytearray(raw)
        flipped[i] ^= 0x01
        with pytest.raises(CorruptCheckpointError):
            CheckpointData.decode(bytes(flipped))


def test_error_names_where() -> None:
    raw = make_data().encode()
    with pytest.raises(CorruptCheckpointError, match="/some/dir/checkpoint-x"):
        CheckpointData.decode(raw[:-1], "/some/dir/checkpoint-x")


@pytest.mark.parametrize("foreign", [
    b"",
    b"hello",
    b"hello world, not a checkpoint at all",
    b"PK\x03\x04" + bytes(100),  # a zip file
    b"\x80\x04\x95" + bytes(40),  # a pickle
])
def test_foreign_bytes_are_corrupt(foreign: bytes) -> None:
    with pytest.raises(CorruptCheckpointError):
        CheckpointData.decode(foreign)


def test_foreign_bytes_with_a_valid_crc_are_corrupt() -> None:
    """The CRC alone is no proof: the magic must be ours."""
    body = b"NOTOURS\x01" + bytes(30)
    with pytest.raises(CorruptCheckpointError, match="bad magic"):
        CheckpointData.decode(body + zlib.crc32(body).to_bytes(4, "big"))


def test_valid_crc_over_garbage_body_is_corrupt() -> None:
    body = CODEC.magic + b"\x01" + b"\xff" * 7
    with pytest.raises(CorruptCheckpointError, match="does not decode"):
        CheckpointData.decode(body + zlib.crc32(body).to_bytes(4, "big"))


def test_unknown_schema_version_is_named() -> None:
    """A checkpoint from a newer release is refused, naming its version."""
    newer = VersionedCodec("checkpoint", CODEC.magic, {1: SCHEMA_V1, 9: SCHEMA_V1})
    good = make_data()
    body = newer.encode({
        "checkpoint_time_ms": good.checkpoint_time_ms, "written_wall_ms": 0, "app_id": "a",
        "batch_ms": 1000, "zero_time_ms": 0, "fingerprint": "f", "graph_shape": [],
        "pending_times_ms": [], "state_rdds": [], "conf": {}})
    assert body[len(CODEC.magic)] == 9
    with pytest.raises(CorruptCheckpointError) as info:
        CheckpointData.decode(body + zlib.crc32(body).to_bytes(4, "big"), "ckpt-9")
    message = str(info.value)
    assert "version 9" in message
    assert "ckpt-9" in message


def test_errors_share_the_package_root() -> None:
    assert issubclass(CorruptCheckpointError, CheckpointError)


# -- epoch (schema version 3) ----------------------------------------------------------


def _datum_of(data: CheckpointData) -> dict[str, object]:
    return {
        "checkpoint_time_ms": data.checkpoint_time_ms, "written_wall_ms": data.written_wall_ms,
        "app_id": data.app_id, "batch_ms": data.batch_ms, "zero_time_ms": data.zero_time_ms,
        "fingerprint": data.fingerprint, "graph_shape": list(data.graph_shape),
        "pending_times_ms": list(data.pending_times_ms),
        "state_rdds": [{"stream": s.stream, "time_ms": s.time_ms, "path": s.path}
                       for s in data.state_rdds],
        "conf": dict(data.conf), "graph": data.graph}


def _framed(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_the_epoch_round_trips_in_the_newest_version() -> None:
    data = make_data(4000, graph=b"pickled", epoch=7)
    raw = data.encode()
    assert raw[len(CODEC.magic)] == CODEC.latest == 3
    assert CheckpointData.decode(raw) == data


def test_the_epoch_defaults_to_zero() -> None:
    assert make_data().epoch == 0
    assert CheckpointData.decode(make_data().encode()).epoch == 0


def test_a_version_2_checkpoint_decodes_as_epoch_0() -> None:
    """Every checkpoint written before the epoch existed was written without HA."""
    data = make_data(5000, graph=b"the graph")
    raw = _framed(CODEC.encode(_datum_of(data), version=2))
    assert raw[len(CODEC.magic)] == 2
    assert CheckpointData.decode(raw) == data
    assert CheckpointData.decode(raw).epoch == 0


def test_a_version_1_checkpoint_decodes_as_epoch_0_without_a_graph() -> None:
    data = make_data(6000)
    datum = _datum_of(data)
    del datum["graph"]
    raw = _framed(CODEC.encode(datum, version=1))
    got = CheckpointData.decode(raw)
    assert got == data
    assert got.epoch == 0 and got.graph is None


def test_a_negative_epoch_is_refused_both_ways() -> None:
    with pytest.raises(CheckpointWriteError, match="negative"):
        make_data(epoch=-1).encode()
    raw = _framed(CODEC.encode({**_datum_of(make_data()), "epoch": -3}))
    with pytest.raises(CorruptCheckpointError, match="epoch -3"):
        CheckpointData.decode(raw, "ckpt-neg")
