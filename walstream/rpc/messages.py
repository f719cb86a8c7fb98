"""Messages between receivers and the driver's ReceiverTracker, as versioned Avro.

gRPC carries them as opaque bytes (generic handlers, no generated code), so the
wire format is the same versioned-envelope discipline as everything we store.

Every body is decoded through :class:`BoundedCodec`: a body over
``MAX_MESSAGE_BYTES``, truncated, garbage, or with an array or string over its
message's :class:`~walstream.rpc.bounds.Bounds` raises
:class:`~walstream.rpc.errors.RpcMessageError` (a
:class:`~walstream.errors.CorruptDataError`) before fastavro builds anything, so
decoding costs time and memory bounded by the bounds, on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.errors import CorruptDataError
from walstream.rpc.bounds import Bounds, check_bounds
from walstream.rpc.errors import RpcMessageError
from walstream.rpc.schemas import BLOCK_FIGURES_SCHEMA, BLOCK_INFO_SCHEMA, SOURCE_RANGE_SCHEMA

SERVICE = "walstream.ReceiverTracker"

#: The envelope version of every message. Version 2 added authentication (a
#: registration nonce and proof, session tokens, command sequence numbers and MACs:
#: :mod:`walstream.rpc.auth`); version 3 the receiver's figures in AddBlock (its
#: WAL write of the block, the source ends it knows: the driver's metrics). Only
#: this version is read: a version 1 peer cannot authenticate and a version 2 peer
#: sends AddBlock in another layout, so their messages are refused with the version
#: named (:class:`~walstream.errors.UnknownSchemaVersionError`) instead of being served.
PROTOCOL_VERSION = 3

#: The gRPC message limit of both sides: a block report at the endpoint's default
#: limits (4096 source ranges, 1024 source ends, 512-byte names) takes under 2.8 MiB.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Bytes of one string of a Report, a refusal or a command on the wire; a receiver
#: truncates what it sends to this, the driver keeps at most its own smaller limit.
MAX_TEXT_BYTES = 64 * 1024
#: UTF-8 bytes of one name (block id, topic, host, executor id) on the wire.
MAX_NAME_BYTES = 512
#: Source ranges in one block report, and positions in a registration answer.
MAX_SOURCE_RANGES = 4096
MAX_POSITIONS = 1 << 20
#: Source ends in one block report's figures (a receiver sends more in later reports).
MAX_SOURCE_ENDS = 1024
#: The bound of an AddBlock's source ends, by their record's name (walstream.rpc.bounds).
SOURCE_END_LIMIT = ("SourceEnd", MAX_SOURCE_ENDS, "max_source_ends_per_report")


class BoundedCodec(VersionedCodec):
    """A :class:`VersionedCodec` whose :meth:`decode` first checks the body's size and
    :class:`Bounds` without decoding it."""

    def __init__(self, name: str, schema: dict[str, Any], bounds: Bounds,
                 max_bytes: int = MAX_MESSAGE_BYTES, version: int = PROTOCOL_VERSION) -> None:
        super().__init__(f"rpc {name}", b"WSRP", {version: schema}, max_bytes)
        self.name = name
        self.schema = schema
        self.bounds = bounds
        self.max_message_bytes = max_bytes
        self.version = version

    def with_bounds(self, bounds: Bounds, max_bytes: int | None = None) -> BoundedCodec:
        return BoundedCodec(self.name, self.schema, bounds,
                            self.max_message_bytes if max_bytes is None else max_bytes,
                            self.version)

    def decode(self, data: bytes | bytearray | memoryview,
               max_bytes: int | None = None) -> tuple[int, dict[str, Any]]:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise RpcMessageError(f"{self.kind}: a {type(data).__name__} is not bytes")
        limit = self.max_message_bytes if max_bytes is None else max_bytes
        if len(data) > limit:
            raise RpcMessageError(f"{self.kind}: {len(data)} bytes is over the limit of "
                                  f"{limit} (max_message_bytes)")
        version = self.peek_version(data)  # magic and version byte, typed errors
        if version in self.known:
            check_bounds(self.schema, data, len(self.magic) + 1, self.bounds, self.kind)
        return super().decode(data, limit)


def _codec(name: str, fields: list[dict[str, Any]], bounds: Bounds) -> BoundedCodec:
    # The namespace names the first layout; the envelope's version byte tells them apart.
    schema = {"type": "record", "name": name, "namespace": "walstream.rpc.v1", "fields": fields}
    return BoundedCodec(name, schema, bounds)


_NAMES = Bounds(0, MAX_NAME_BYTES, string_name="max_name_bytes")
_TEXT = Bounds(0, MAX_TEXT_BYTES, string_name="max_text_bytes")

REGISTER_REQUEST = _codec("RegisterReceiver", [
    {"name": "stream_id", "type": "int"},
    {"name": "host", "type": "string"},
    {"name": "executor_id", "type": "string"},
    {"name": "receiver_type", "type": "string"},
    # Fresh per registration; the answer's proof covers it (no replayed answers).
    {"name": "nonce", "type": "bytes", "default": ""},
], _NAMES)
REGISTER_RESPONSE = _codec("RegisterReceiverResponse", [
    {"name": "accepted", "type": "boolean"},
    {"name": "message", "type": "string"},
    # Source positions the driver has durably acknowledged for this stream; a
    # restarted receiver resumes from here, not from what its source remembers.
    {"name": "positions", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
    {"name": "rate_limit", "type": "double"},
    # The session token of this registration ("" when refused); later calls present it.
    {"name": "session", "type": "string", "default": ""},
    # HMAC with the driver key over the nonce and this answer (walstream.rpc.auth).
    {"name": "proof", "type": "bytes", "default": ""},
], Bounds(MAX_POSITIONS, MAX_TEXT_BYTES, "max_positions", "max_text_bytes"))
ADD_BLOCK_REQUEST = _codec("AddBlock", [
    {"name": "block", "type": BLOCK_INFO_SCHEMA},
    {"name": "session", "type": "string", "default": ""},
    # The receiver's figures for this report (version 3); null: none.
    {"name": "figures", "type": ["null", BLOCK_FIGURES_SCHEMA], "default": None},
], Bounds(MAX_SOURCE_RANGES, MAX_NAME_BYTES, "max_source_ranges_per_block", "max_name_bytes",
          (SOURCE_END_LIMIT,)))
ADD_BLOCK_RESPONSE = _codec("AddBlockResponse", [
    {"name": "ok", "type": "boolean"},
    {"name": "message", "type": "string"},
    # HMAC with the driver key over the session, the block id and this answer.
    {"name": "proof", "type": "bytes", "default": ""},
], _TEXT)
REPORT_REQUEST = _codec("ReceiverReport", [
    {"name": "stream_id", "type": "int"},
    {"name": "kind", "type": {"type": "enum", "name": "ReportKind",
                              "symbols": ["ERROR", "DEREGISTER"]}},
    {"name": "message", "type": "string"},
    {"name": "error", "type": "string"},
    {"name": "session", "type": "string", "default": ""},
], _TEXT)
EMPTY = _codec("Empty", [], _NAMES)
CONTROL_REQUEST = _codec("ControlRequest", [{"name": "stream_id", "type": "int"},
                                            {"name": "session", "type": "string", "default": ""}],
                         _NAMES)
COMMAND = _codec("ReceiverCommand", [
    {"name": "kind", "type": {"type": "enum", "name": "CommandKind",
                              "symbols": ["STOP", "CLEANUP_OLD_BLOCKS", "UPDATE_RATE_LIMIT",
                                          "HEARTBEAT"]}},
    {"name": "message", "type": "string", "default": ""},
    {"name": "thresh_time_ms", "type": "long", "default": 0},
    {"name": "rate_limit", "type": "double", "default": 0.0},
    # Strictly increasing within a session; the MAC (driver key) covers it, the
    # session and every field above.
    {"name": "seq", "type": "long", "default": 0},
    {"name": "mac", "type": "bytes", "default": ""},
], _TEXT)
# A receiver's ask, right before each destructive step of a clean of its WAL, whether
# the driver grants deleting its blocks older than ``thresh_time_ms`` now.
CLEAN_GRANT_REQUEST = _codec("CleanGrantRequest", [
    {"name": "stream_id", "type": "int"},
    {"name": "session", "type": "string", "default": ""},
    {"name": "thresh_time_ms", "type": "long"},
    # Fresh per ask; the answer's proof covers it (no replayed grants).
    {"name": "nonce", "type": "bytes", "default": ""},
], _NAMES)
CLEAN_GRANT_RESPONSE = _codec("CleanGrantResponse", [
    {"name": "granted", "type": "boolean"},
    {"name": "message", "type": "string"},
    # How long the driver is certain to lead from its answer, in ms (its lease's
    # validity left); 0: it leads with no lease (no HA), nothing bounds it.
    {"name": "valid_ms", "type": "long", "default": 0},
    # HMAC with the driver key over the session, the threshold, the nonce and this answer.
    {"name": "proof", "type": "bytes", "default": ""},
], _TEXT)

ALL_CODECS: tuple[BoundedCodec, ...] = (
    REGISTER_REQUEST, REGISTER_RESPONSE, ADD_BLOCK_REQUEST, ADD_BLOCK_RESPONSE,
    REPORT_REQUEST, EMPTY, CONTROL_REQUEST, COMMAND, CLEAN_GRANT_REQUEST,
    CLEAN_GRANT_RESPONSE)


@dataclass(frozen=True)
class BadRequest:
    """What a server-side request decoder returns for a body it refused, so the
    handler can answer with the reason instead of gRPC's bare INTERNAL error."""

    message: str


def truncate_utf8(text: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """``text`` cut so that its UTF-8 fits ``max_bytes`` (for strings a receiver sends)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    marker = f"... ({len(data)} bytes, truncated)"
    return data[:max_bytes - len(marker)].decode("utf-8", "ignore") + marker


def encode(codec: VersionedCodec) -> Callable[[Mapping[str, Any]], bytes]:
    return lambda datum: codec.encode(datum)


def decode(codec: VersionedCodec) -> Callable[[bytes], dict[str, Any]]:
    """A decoder raising :class:`CorruptDataError` (:class:`RpcMessageError` for a
    bound) on any body that is not one well-formed message within its bounds."""
    return lambda data: codec.decode(data)[1]


def decode_request(codec: VersionedCodec) -> Callable[[bytes], dict[str, Any] | BadRequest]:
    """:func:`decode` for a server handler: a refused body becomes :class:`BadRequest`."""
    def run(data: bytes) -> dict[str, Any] | BadRequest:
        try:
            return codec.decode(data)[1]
        except CorruptDataError as exc:
            return BadRequest(str(exc))
    return run
