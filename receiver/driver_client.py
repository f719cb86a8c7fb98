"""DriverClient: a receiver's side of the ReceiverTracker RPC (gRPC, bounded calls).

Implements the supervisor's ``BlockReporter`` protocol over the network, plus the
driver-to-receiver control stream (StopReceiver, CleanupOldBlocks,
UpdateRateLimit). Every call has a deadline; an unreachable driver is an error
the supervisor's bounded retries handle, never a hang. Every answer is decoded
within :mod:`walstream.rpc.messages`' bounds (a typed error otherwise), and messages
are limited to ``MAX_MESSAGE_BYTES`` both ways.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc

from receiver.block import SourceRange
from receiver.block_info import ReceivedBlockInfo
from receiver.registration import Registration
from walstream.rpc import messages as m

log = logging.getLogger(__name__)


class DriverClient:
    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", m.MAX_MESSAGE_BYTES),
                              ("grpc.max_send_message_length", m.MAX_MESSAGE_BYTES)])

        def unary(name: str, req: Any, resp: Any) -> Any:
            return self._channel.unary_unary(
                f"/{m.SERVICE}/{name}", request_serializer=m.encode(req),
                response_deserializer=m.decode(resp))

        self._register = unary("RegisterReceiver", m.REGISTER_REQUEST, m.REGISTER_RESPONSE)
        self._add_block = unary("AddBlock", m.ADD_BLOCK_REQUEST, m.ADD_BLOCK_RESPONSE)
        self._report = unary("Report", m.REPORT_REQUEST, m.EMPTY)
        self._control = self._channel.unary_stream(
            f"/{m.SERVICE}/Control", request_serializer=m.encode(m.CONTROL_REQUEST),
            response_deserializer=m.decode(m.COMMAND))

    def register_receiver(self, stream_id: int, host: str, executor_id: str,
                          receiver_type: str = "") -> Registration:
        r = self._register(
            {"stream_id": stream_id, "host": host, "executor_id": executor_id,
             "receiver_type": receiver_type},
            timeout=self.timeout_s, wait_for_ready=True)
        return Registration(
            bool(r["accepted"]), str(r["message"]),
            tuple(SourceRange.from_dict(p) for p in r["positions"]), float(r["rate_limit"]))

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        r = self._add_block({"block": info.to_dict()}, timeout=self.timeout_s)
        if not r["ok"]:
            log.error("driver refused block %s: %s", info.block_id, r["message"])
        return bool(r["ok"])

    def report_error(self, stream_id: int, message: str, error: str) -> None:
        self._send_report(stream_id, "ERROR", message, error)

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None:
        self._send_report(stream_id, "DEREGISTER", message, error)

    def _send_report(self, stream_id: int, kind: str, message: str, error: str) -> None:
        # Cut to what the driver accepts on the wire: a long traceback is still
        # reported (the driver keeps a shorter prefix), never refused.
        self._report({"stream_id": stream_id, "kind": kind,
                      "message": m.truncate_utf8(message), "error": m.truncate_utf8(error)},
                     timeout=self.timeout_s)

    def control(self, stream_id: int) -> Iterator[dict[str, Any]]:
        """Commands from the driver until it closes the stream (no deadline: long-lived)."""
        return iter(self._control({"stream_id": stream_id}))

    def close(self) -> None:
        self._channel.close()
