"""Messages between receivers and the driver's ReceiverTracker, as versioned Avro.

gRPC carries them as opaque bytes (generic handlers, no generated code), so the
wire format is the same versioned-envelope discipline as everything we store.
"""

from __future__ import annotations

from typing import Any

from receiver.block import SOURCE_RANGE_SCHEMA
from receiver.block_info import BLOCK_INFO_SCHEMA
from walstream.avro_codec import VersionedCodec

SERVICE = "walstream.ReceiverTracker"


def _codec(name: str, fields: list[dict[str, Any]]) -> VersionedCodec:
    schema = {"type": "record", "name": name, "namespace": "walstream.rpc.v1", "fields": fields}
    return VersionedCodec(f"rpc {name}", b"WSRP", {1: schema})


REGISTER_REQUEST = _codec("RegisterReceiver", [
    {"name": "stream_id", "type": "int"},
    {"name": "host", "type": "string"},
    {"name": "executor_id", "type": "string"},
    {"name": "receiver_type", "type": "string"},
])
REGISTER_RESPONSE = _codec("RegisterReceiverResponse", [
    {"name": "accepted", "type": "boolean"},
    {"name": "message", "type": "string"},
    # Source positions the driver has durably acknowledged for this stream; a
    # restarted receiver resumes from here, not from what its source remembers.
    {"name": "positions", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
    {"name": "rate_limit", "type": "double"},
])
ADD_BLOCK_REQUEST = _codec("AddBlock", [{"name": "block", "type": BLOCK_INFO_SCHEMA}])
ADD_BLOCK_RESPONSE = _codec("AddBlockResponse", [
    {"name": "ok", "type": "boolean"},
    {"name": "message", "type": "string"},
])
REPORT_REQUEST = _codec("ReceiverReport", [
    {"name": "stream_id", "type": "int"},
    {"name": "kind", "type": {"type": "enum", "name": "ReportKind",
                              "symbols": ["ERROR", "DEREGISTER"]}},
    {"name": "message", "type": "string"},
    {"name": "error", "type": "string"},
])
EMPTY = _codec("Empty", [])
CONTROL_REQUEST = _codec("ControlRequest", [{"name": "stream_id", "type": "int"}])
COMMAND = _codec("ReceiverCommand", [
    {"name": "kind", "type": {"type": "enum", "name": "CommandKind",
                              "symbols": ["STOP", "CLEANUP_OLD_BLOCKS", "UPDATE_RATE_LIMIT",
                                          "HEARTBEAT"]}},
    {"name": "message", "type": "string", "default": ""},
    {"name": "thresh_time_ms", "type": "long", "default": 0},
    {"name": "rate_limit", "type": "double", "default": 0.0},
])


def encode(codec: VersionedCodec) -> Any:
    return lambda datum: codec.encode(datum)


def decode(codec: VersionedCodec) -> Any:
    return lambda data: codec.decode(data)[1]
