"""Fuzz of the RPC body decoders of both sides (walstream/rpc/messages.py): every input
decodes or raises a typed error (CorruptDataError; RpcMessageError for a bound), in
bounded time and memory, and the server's request decoders never raise at all."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.walstream.fuzz_checks import (
    FUZZ,
    WRONG_TYPES,
    decodes_or_typed_error,
    garbage,
    huge_lengths,
    truncations,
)
from walstream.avro_codec import avro_long
from walstream.errors import CorruptDataError, UnknownSchemaVersionError
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.rpc import messages as m
from walstream.rpc.errors import RpcMessageError

RANGE = {"topic": "src", "partition": 3, "from_offset": 10, "until_offset": 20}
BLOCK = {"stream_id": 1, "block_id": "input-1-a", "num_records": 5,
         "handle": {"topic": "wal-t", "partition": 0, "offset": 7, "chunks": 2, "index": -1},
         "source": [RANGE, RANGE]}
END = {"topic": "src", "partition": 3, "end_offset": 25}
FIGURES = {"wal_write_seconds": 0.004, "wal_bytes": 1234, "source_ends": [END, END]}
VALID: dict[str, tuple[m.BoundedCodec, dict[str, Any]]] = {
    "register": (m.REGISTER_REQUEST, {"stream_id": 1, "host": "h", "executor_id": "e:1:2",
                                      "receiver_type": "KafkaReceiver", "nonce": b"n" * 32}),
    "register-answer": (m.REGISTER_RESPONSE, {"accepted": True, "message": "registered",
                                              "positions": [RANGE], "rate_limit": 100.0,
                                              "session": "s" * 43, "proof": b"p" * 32}),
    "add-block": (m.ADD_BLOCK_REQUEST, {"block": BLOCK, "session": "s" * 43,
                                        "figures": FIGURES}),
    "add-block-no-figures": (m.ADD_BLOCK_REQUEST, {"block": BLOCK, "session": "s" * 43,
                                                   "figures": None}),
    "add-block-answer": (m.ADD_BLOCK_RESPONSE, {"ok": False, "message": "refused",
                                                "proof": b"p" * 32}),
    "report": (m.REPORT_REQUEST, {"stream_id": 1, "kind": "ERROR", "message": "m",
                                  "error": "e", "session": "s" * 43}),
    "empty": (m.EMPTY, {}),
    "control": (m.CONTROL_REQUEST, {"stream_id": 4, "session": "s" * 43}),
    "command": (m.COMMAND, {"kind": "UPDATE_RATE_LIMIT", "message": "", "thresh_time_ms": 0,
                            "rate_limit": 5.0, "seq": 9, "mac": b"m" * 32}),
    "clean-grant": (m.CLEAN_GRANT_REQUEST, {"stream_id": 2, "session": "s" * 43,
                                            "thresh_time_ms": 1_700_000_000_000,
                                            "nonce": b"n" * 32}),
    "clean-grant-answer": (m.CLEAN_GRANT_RESPONSE, {"granted": True, "message": "",
                                                    "valid_ms": 2500, "proof": b"p" * 32}),
}
ENCODED = {name: codec.encode(datum) for name, (codec, datum) in VALID.items()}
VERSION = bytes((m.PROTOCOL_VERSION,))
PREFIX = m.ADD_BLOCK_REQUEST.magic + VERSION


def _add_block(data: bytes) -> tuple[ReceivedBlockInfo, BlockFigures | None]:
    """What the driver's AddBlock handler does with a body."""
    req = m.decode(m.ADD_BLOCK_REQUEST)(data)
    figures = req["figures"]
    return (ReceivedBlockInfo.from_dict(req["block"]),
            BlockFigures.from_dict(figures) if figures else None)


DECODERS = {**{name: m.decode(codec) for name, (codec, _) in VALID.items()},
            "add-block-info": _add_block}


def test_every_codec_is_covered_and_its_valid_message_round_trips() -> None:
    assert {id(c) for c, _ in VALID.values()} == {id(c) for c in m.ALL_CODECS}
    for name, (codec, datum) in VALID.items():
        assert ENCODED[name][len(codec.magic)] == m.PROTOCOL_VERSION == 3
        assert m.decode(codec)(ENCODED[name]) == datum


def test_an_add_block_of_version_3_round_trips_its_figures() -> None:
    info, figures = _add_block(ENCODED["add-block"])
    assert info == ReceivedBlockInfo.from_dict(BLOCK)
    assert figures == BlockFigures.from_dict(FIGURES)
    assert figures.source_ends[0].end_offset == 25 and figures.wal_bytes == 1234
    assert BlockFigures.from_dict(figures.to_dict()) == figures
    assert _add_block(ENCODED["add-block-no-figures"]) == (info, None)
    # A sender leaving the figures out sends none.
    assert m.decode(m.ADD_BLOCK_REQUEST)(
        m.ADD_BLOCK_REQUEST.encode({"block": BLOCK, "session": ""}))["figures"] is None


@FUZZ
@given(st.sampled_from(sorted(DECODERS)), garbage)
def test_random_bytes_raise_a_typed_error(name: str, data: bytes) -> None:
    decodes_or_typed_error(DECODERS[name], data)


@FUZZ
@given(st.sampled_from(sorted(DECODERS)), garbage)
def test_a_valid_envelope_with_a_garbage_body_raises_a_typed_error(name: str,
                                                                   body: bytes) -> None:
    decodes_or_typed_error(DECODERS[name], PREFIX + body)


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.integers(min_value=0), st.integers(0, 255))
def test_a_flipped_byte_decodes_or_raises_a_typed_error(name: str, pos: int,
                                                        value: int) -> None:
    data = bytearray(ENCODED[name])
    data[pos % len(data)] = value
    decodes_or_typed_error(DECODERS[name], bytes(data))


@FUZZ
@given(st.sampled_from(sorted(VALID)), garbage)
def test_the_server_request_decoders_answer_bad_request_instead_of_raising(
    name: str, data: bytes
) -> None:
    codec = VALID[name][0]
    got = m.decode_request(codec)(data)
    assert isinstance(got, dict | m.BadRequest)


@pytest.mark.parametrize("name", sorted(VALID))
def test_every_truncation_of_a_valid_message_raises_a_typed_error(name: str) -> None:
    for cut in truncations(ENCODED[name]):
        with pytest.raises(CorruptDataError):
            DECODERS[name](cut)


def test_huge_declared_lengths_and_counts_raise_without_allocating() -> None:
    block_id_at = PREFIX + avro_long(1)  # stream id, then the block id's length
    handle = b"\x0awal-t\x00\x0e\x04\x01"
    source_at = block_id_at + b"\x02x" + avro_long(5) + handle  # then the ranges' count
    register_answer = m.REGISTER_RESPONSE.magic + VERSION + b"\x01\x00"  # then positions' count
    add_block = ENCODED["add-block-no-figures"]
    # The no-figures body ends in the union's null branch (0): the record branch (2),
    # a double and a long, then the source ends' count.
    ends_at = add_block[:-1] + b"\x02" + b"\x00" * 8 + avro_long(7)
    cases = [
        *[(DECODERS["add-block"], d) for d in huge_lengths(ends_at)],
        *[(DECODERS["add-block"], d) for d in huge_lengths(block_id_at)],
        *[(DECODERS["add-block"], d) for d in huge_lengths(source_at)],
        *[(DECODERS["register-answer"], d) for d in huge_lengths(register_answer)],
        *[(DECODERS["command"], d) for d in huge_lengths(m.COMMAND.magic + VERSION)],
    ]
    for decode, data in cases:
        assert decodes_or_typed_error(decode, data) is None


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", sorted(VALID))
def test_a_message_of_an_older_protocol_version_is_refused_naming_the_version(
    name: str, version: int
) -> None:
    """Version 1 had no authentication, version 2 no figures in AddBlock: their
    messages are refused, never served."""
    codec = VALID[name][0]
    old = codec.magic + bytes((version,)) + ENCODED[name][len(codec.magic) + 1:]
    with pytest.raises(UnknownSchemaVersionError, match=f"unknown schema version {version}"):
        DECODERS[name](old)
    got = m.decode_request(codec)(old)
    assert isinstance(got, m.BadRequest) and f"version {version}" in got.message


def test_an_add_block_of_version_2_is_refused_naming_the_version() -> None:
    """A version 2 receiver's AddBlock (no figures) as it was laid out."""
    v2 = m.ADD_BLOCK_REQUEST.magic + b"\x02" + ENCODED["add-block-no-figures"][
        len(m.ADD_BLOCK_REQUEST.magic) + 1:-1]
    got = m.decode_request(m.ADD_BLOCK_REQUEST)(v2)
    assert isinstance(got, m.BadRequest)
    assert "unknown schema version 2" in got.message


def test_a_body_over_max_message_bytes_is_refused_before_decoding() -> None:
    data = ENCODED["report"] + b"\x00" * m.MAX_MESSAGE_BYTES
    for decode in DECODERS.values():
        assert decodes_or_typed_error(decode, data) is None
    with pytest.raises(RpcMessageError, match="max_message_bytes"):
        m.decode(m.REPORT_REQUEST)(data)


@pytest.mark.parametrize(("name", "field", "value", "limit"), [
    ("add-block", "source", [RANGE] * (m.MAX_SOURCE_RANGES + 1), "max_source_ranges_per_block"),
    ("add-block", "block_id", "b" * (m.MAX_NAME_BYTES + 1), "max_name_bytes"),
    ("add-block", "source_ends", [END] * (m.MAX_SOURCE_ENDS + 1), "max_source_ends_per_report"),
    ("add-block", "end_topic", "t" * (m.MAX_NAME_BYTES + 1), "max_name_bytes"),
    ("report", "message", "m" * (m.MAX_TEXT_BYTES + 1), "max_text_bytes"),
    ("register", "host", "h" * (m.MAX_NAME_BYTES + 1), "max_name_bytes"),
])
def test_an_array_or_string_over_its_bound_is_refused_naming_the_bound(
    name: str, field: str, value: Any, limit: str
) -> None:
    codec, datum = VALID[name]
    if field == "source_ends":
        over = {**datum, "figures": {**FIGURES, "source_ends": value}}
    elif field == "end_topic":
        over = {**datum, "figures": {**FIGURES, "source_ends": [{**END, "topic": value}]}}
    elif name == "add-block":
        over = {**datum, "block": {**BLOCK, field: value}}
    else:
        over = {**datum, field: value}
    with pytest.raises(RpcMessageError, match=limit):
        m.decode(codec)(codec.encode(over))


def test_source_ends_have_their_own_bound_not_the_source_ranges() -> None:
    """As many ends as the wire allows pass, though more than a tighter range bound."""
    datum = {**VALID["add-block"][1],
             "figures": {**FIGURES, "source_ends": [END] * m.MAX_SOURCE_ENDS}}
    tight = m.ADD_BLOCK_REQUEST.with_bounds(
        m.Bounds(2, m.MAX_NAME_BYTES, "max_source_ranges_per_block", "max_name_bytes",
                 (m.SOURCE_END_LIMIT,)))
    assert len(m.decode(tight)(tight.encode(datum))["figures"]["source_ends"]) == \
        m.MAX_SOURCE_ENDS
    three_ranges = {**datum, "block": {**BLOCK, "source": [RANGE] * 3}}
    with pytest.raises(RpcMessageError, match="max_source_ranges_per_block"):
        m.decode(tight)(tight.encode(three_ranges))


@pytest.mark.parametrize("wrong", WRONG_TYPES, ids=lambda w: type(w).__name__)
def test_input_of_the_wrong_type_raises_a_typed_error(wrong: object) -> None:
    for decode in DECODERS.values():
        with pytest.raises(CorruptDataError, match="not bytes"):
            decode(wrong)  # type: ignore[arg-type]


def test_truncate_utf8_fits_the_wire_bound_and_keeps_short_text() -> None:
    assert m.truncate_utf8("short") == "short"
    cut = m.truncate_utf8("é" * m.MAX_TEXT_BYTES)
    assert len(cut.encode()) <= m.MAX_TEXT_BYTES and "truncated" in cut
