"""The receiver endpoint's call authentication: a gRPC server interceptor.

Every call, whatever its method (an unknown one included), must present the
application's call token as the metadata
:data:`~walstream.rpc.auth.AUTH_METADATA_KEY`; it is compared in constant time
(:func:`~walstream.rpc.auth.call_refusal`). A call that does not is answered
UNAUTHENTICATED with the reason, before its body is decoded and before any
handler runs, so an unauthenticated peer can neither register, report nor follow
a Control stream, nor make the endpoint decode anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from walstream.rpc.auth import AUTH_METADATA_KEY, call_refusal

log = logging.getLogger(__name__)

#: At most one warning per this many seconds about refused calls (with their count),
#: so a peer hammering the port cannot flood the driver's log.
WARN_EVERY_S = 10.0


def _refusing(message: str) -> Any:
    """A handler that ends the call with UNAUTHENTICATED at once, whatever the
    method's kind. It is request-streaming on purpose: gRPC runs such a handler
    without first waiting for a request message, where a unary one would hold a
    pool thread and a slot of ``maximum_concurrent_rpcs`` until the peer sends one
    (a peer that sends headers only would hold them for good). It never reads or
    decodes the request."""
    def refuse(_requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield b""  # unreachable: abort raises

    return grpc.stream_stream_rpc_method_handler(refuse)


class CallAuthInterceptor(grpc.ServerInterceptor):
    """Refuses every call that does not present ``call_token``; counts the refusals."""

    def __init__(self, call_token: bytes) -> None:
        self._token = call_token
        self._lock = threading.Lock()
        self.refused = 0
        self._unwarned = 0
        self._warned_at = -WARN_EVERY_S

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        metadata = handler_call_details.invocation_metadata or ()
        refusal = call_refusal(self._token, [md.value for md in metadata
                                             if md.key == AUTH_METADATA_KEY])
        if refusal is None:
            return continuation(handler_call_details)
        self._note_refusal(str(handler_call_details.method), refusal)
        return _refusing(f"walstream receiver endpoint: {refusal}")

    def _note_refusal(self, method: str, refusal: str) -> None:
        with self._lock:
            self.refused += 1
            self._unwarned += 1
            now = time.monotonic()
            if now - self._warned_at < WARN_EVERY_S:
                return
            count, self._unwarned, self._warned_at = self._unwarned, 0, now
        log.warning("receiver endpoint refused %d unauthenticated call(s), the last to %s: %s",
                    count, method[:200], refusal)
