"""DriverClient: a receiver's side of the ReceiverTracker RPC (gRPC, bounded calls).

Implements the supervisor's ``BlockReporter`` protocol over the network, plus the
driver-to-receiver control stream (StopReceiver, CleanupOldBlocks,
UpdateRateLimit). Every call has a deadline; an unreachable driver is an error
the supervisor's bounded retries handle, never a hang. Every answer is decoded
within :mod:`walstream.rpc.messages`' bounds (a typed error otherwise), and messages
are limited to ``MAX_MESSAGE_BYTES`` both ways.

Authentication (:mod:`walstream.rpc.auth`): every call presents the application's
call token; AddBlock, Report and Control present the session token of this
client's registration of the stream. The client believes nothing the driver key
does not sign: a registration answer must prove the nonce sent with it, an
accepting AddBlock answer its session and block id (else
:class:`~walstream.receiver.errors.DriverProofError`, and the source is not acknowledged),
and a command its session and a sequence number above the last one taken (else
it is logged and ignored). A refused secret raises
:class:`~walstream.receiver.errors.EndpointAuthError`, a refused session or block
:class:`~walstream.receiver.errors.EndpointPermissionError`; neither is retried. With TLS
credentials the channel is TLS, trusting only the credentials' certificates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.errors import (
    CleanRefusedError,
    DriverProofError,
    EndpointAuthError,
    EndpointPermissionError,
    EndpointSecurityError,
)
from walstream.receiver.registration import Registration
from walstream.rpc import auth
from walstream.rpc import messages as m

log = logging.getLogger(__name__)


class DriverClient:
    def __init__(self, address: str, timeout_s: float = 30.0,
                 credentials: auth.EndpointCredentials | None = None) -> None:
        """``credentials``: the application's (a receiver's task spec carries them);
        default: those of the endpoint serving ``address`` in this process, if one
        does, else none (every call is then refused with :class:`EndpointAuthError`)."""
        self.address = address
        self.timeout_s = timeout_s
        self.credentials = credentials or auth.local_credentials(address)
        self._metadata = self.credentials.metadata if self.credentials else ()
        options = [("grpc.max_receive_message_length", m.MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", m.MAX_MESSAGE_BYTES)]
        root = self.credentials.tls_root_pem if self.credentials else None
        if root is not None:
            self._channel = grpc.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates=root), options)
        else:
            self._channel = grpc.insecure_channel(address, options)
        self._lock = threading.Condition()
        self._sessions: dict[int, str] = {}  # stream -> this client's current session
        self._registering: dict[int, int] = {}  # stream -> registrations in flight
        self._last_seq: dict[tuple[int, str], int] = {}  # (stream, session) -> last command

        def unary(name: str, req: Any, resp: Any) -> Any:
            return self._channel.unary_unary(
                f"/{m.SERVICE}/{name}", request_serializer=m.encode(req),
                response_deserializer=m.decode(resp))

        self._register = unary("RegisterReceiver", m.REGISTER_REQUEST, m.REGISTER_RESPONSE)
        self._add_block = unary("AddBlock", m.ADD_BLOCK_REQUEST, m.ADD_BLOCK_RESPONSE)
        self._report = unary("Report", m.REPORT_REQUEST, m.EMPTY)
        self._may_clean = unary("MayClean", m.CLEAN_GRANT_REQUEST, m.CLEAN_GRANT_RESPONSE)
        self._control = self._channel.unary_stream(
            f"/{m.SERVICE}/Control", request_serializer=m.encode(m.CONTROL_REQUEST),
            response_deserializer=m.decode(m.COMMAND))

    # -- errors -------------------------------------------------------------------------

    def typed(self, exc: grpc.RpcError, what: str) -> Exception:
        """``exc`` as :class:`EndpointAuthError` or :class:`EndpointPermissionError` when
        the endpoint refused the credentials or the session; else ``exc`` itself."""
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return EndpointAuthError(
                f"{what}: the driver endpoint at {self.address} refused this receiver's "
                f"application secret ({details}). The receiver's task spec must carry the "
                "credentials of the driver listening there.")
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return EndpointPermissionError(
                f"{what}: the driver endpoint at {self.address} refused it: {details}")
        return exc

    def _call(self, stub: Any, request: dict[str, Any], what: str, **kw: Any) -> Any:
        try:
            return stub(request, timeout=self.timeout_s, metadata=self._metadata, **kw)
        except grpc.RpcError as exc:
            raise self.typed(exc, what) from exc

    def _driver_key(self) -> bytes:
        if self.credentials is None:
            raise EndpointAuthError(
                f"no credentials for the driver endpoint at {self.address}: cannot check "
                "that its answers come from this application's driver")
        return self.credentials.driver_key

    def session_of(self, stream_id: int) -> str:
        with self._lock:
            return self._sessions.get(stream_id, "")

    def settled_session_of(self, stream_id: int) -> str:
        """:meth:`session_of` once no registration of the stream is in flight (at most
        ``timeout_s`` later): the driver may end a Control stream for a new session
        before this client has the registration's answer."""
        with self._lock:
            self._lock.wait_for(lambda: not self._registering.get(stream_id), self.timeout_s)
            return self._sessions.get(stream_id, "")

    # -- BlockReporter --------------------------------------------------------------------

    def register_receiver(self, stream_id: int, host: str, executor_id: str,
                          receiver_type: str = "") -> Registration:
        with self._lock:
            self._registering[stream_id] = self._registering.get(stream_id, 0) + 1
        try:
            return self._register_once(stream_id, host, executor_id, receiver_type)
        finally:
            with self._lock:
                self._registering[stream_id] -= 1
                self._lock.notify_all()

    def _register_once(self, stream_id: int, host: str, executor_id: str,
                       receiver_type: str) -> Registration:
        nonce = auth.new_nonce()
        r = self._call(self._register,
                       {"stream_id": stream_id, "host": host, "executor_id": executor_id,
                        "receiver_type": receiver_type, "nonce": nonce},
                       f"registering stream {stream_id}", wait_for_ready=True)
        if not auth.registration_is_signed(self._driver_key(), stream_id, nonce, r):
            raise DriverProofError(
                f"the registration answer from {self.address} for stream {stream_id} does "
                "not prove the application secret: whatever listens there is not the driver "
                "that launched this receiver; its answer was ignored")
        registration = Registration(
            bool(r["accepted"]), str(r["message"]),
            tuple(SourceRange.from_dict(p) for p in r["positions"]), float(r["rate_limit"]),
            str(r["session"]))
        if registration.accepted:
            with self._lock:
                self._sessions[stream_id] = registration.session
        return registration

    def add_block(self, info: ReceivedBlockInfo, figures: BlockFigures | None = None) -> bool:
        """Report a stored block, with the receiver's ``figures`` (metrics only: the
        answer does not depend on them)."""
        session = self.session_of(info.stream_id)
        r = self._call(self._add_block,
                       {"block": info.to_dict(), "session": session,
                        "figures": figures.to_dict() if figures is not None else None},
                       f"reporting block {info.block_id}")
        if not r["ok"]:
            log.error("driver refused block %s: %s", info.block_id, r["message"])
            return False
        # Only an acceptance is acted on (the source is acknowledged after it): it must
        # come from the driver, for this session and block.
        if not auth.add_block_is_signed(self._driver_key(), info.stream_id, session,
                                        info.block_id, r):
            raise DriverProofError(
                f"the answer from {self.address} accepting block {info.block_id} does not "
                "prove the application secret: not this receiver's driver; the block's "
                "source is not acknowledged")
        return True

    def may_clean(self, stream_id: int, thresh_time_ms: int) -> float | None:
        """Whether the driver grants deleting ``stream_id``'s WAL data older than
        ``thresh_time_ms`` now: the seconds it is certain to keep leading from its
        answer, None when no lease bounds it. :class:`CleanRefusedError` when it
        refuses or cannot be asked; :class:`DriverProofError` for a grant that does
        not prove the application secret (nothing is deleted on it)."""
        session = self.session_of(stream_id)
        nonce = auth.new_nonce()
        what = f"asking to delete stream {stream_id}'s WAL data older than {thresh_time_ms}"
        try:
            r = self._call(self._may_clean, {"stream_id": stream_id, "session": session,
                                             "thresh_time_ms": thresh_time_ms, "nonce": nonce},
                           what)
        except (grpc.RpcError, EndpointPermissionError) as exc:
            raise CleanRefusedError(f"{what}: {exc}") from exc
        if not r["granted"]:
            raise CleanRefusedError(f"{what}: refused: {r['message']}")
        if not auth.clean_grant_is_signed(self._driver_key(), stream_id, session,
                                          thresh_time_ms, nonce, r):
            raise DriverProofError(
                f"{what}: the grant from {self.address} does not prove the application "
                "secret: not this receiver's driver; nothing is deleted")
        return None if r["valid_ms"] == 0 else r["valid_ms"] / 1000

    def report_error(self, stream_id: int, message: str, error: str) -> None:
        self._send_report(stream_id, "ERROR", message, error)

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None:
        self._send_report(stream_id, "DEREGISTER", message, error)

    def _send_report(self, stream_id: int, kind: str, message: str, error: str) -> None:
        # Cut to what the driver accepts on the wire: a long traceback is still
        # reported (the driver keeps a shorter prefix), never refused.
        self._call(self._report,
                   {"stream_id": stream_id, "kind": kind, "session": self.session_of(stream_id),
                    "message": m.truncate_utf8(message), "error": m.truncate_utf8(error)},
                   f"reporting {kind.lower()} of stream {stream_id}")

    # -- the Control stream ----------------------------------------------------------------

    def control(self, stream_id: int) -> ControlStream:
        """Commands from the driver until it closes the stream (no deadline: long-lived);
        the stream opens now. Only commands the driver signed for this client's
        session, each with a sequence number above the last, are yielded."""
        return ControlStream(self, stream_id)

    def _open_control(self, stream_id: int, session: str) -> Any:
        return self._control({"stream_id": stream_id, "session": session},
                             metadata=self._metadata)

    def accept_command(self, stream_id: int, session: str, cmd: dict[str, Any]) -> bool:
        """Whether ``cmd`` is the driver's, for ``session``, and newer than the last one
        accepted; when it is, its sequence number becomes the last."""
        if self.credentials is None or not auth.command_is_signed(
                self.credentials.driver_key, stream_id, session, cmd):
            log.warning("stream %d: ignored a %s command without the driver's signature "
                        "(not from the driver that launched this receiver)", stream_id,
                        str(cmd.get("kind"))[:50])
            return False
        seq = int(cmd["seq"])
        with self._lock:
            last = self._last_seq.get((stream_id, session), 0)
            if seq <= last:
                replayed = True
            else:
                replayed = False
                self._last_seq[(stream_id, session)] = seq
        if replayed:
            log.warning("stream %d: ignored a replayed %s command (sequence %d, last %d)",
                        stream_id, cmd["kind"], seq, last)
            return False
        return True

    def close(self) -> None:
        self._channel.close()


class ControlStream:
    """The driver's commands to one stream, as an iterator; :meth:`cancel` ends it.

    Follows the stream of this client's current session: when the driver ends it
    because a newer registration of this client superseded the session (a receiver
    restarted in place), it opens the new session's stream and goes on. A refused
    session or secret raises the typed error; other gRPC errors propagate.
    """

    def __init__(self, client: DriverClient, stream_id: int) -> None:
        self._client = client
        self._stream_id = stream_id
        self._lock = threading.Lock()
        self._cancelled = False
        self._session = client.session_of(stream_id)
        self._call = client._open_control(stream_id, self._session)
        self._commands = self._run()

    def __iter__(self) -> ControlStream:
        return self

    def __next__(self) -> dict[str, Any]:
        return next(self._commands)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            call = self._call
        call.cancel()

    def _run(self) -> Iterator[dict[str, Any]]:
        client, stream_id = self._client, self._stream_id
        while True:
            try:
                for cmd in self._call:
                    if client.accept_command(stream_id, self._session, cmd):
                        yield cmd
            except grpc.RpcError as exc:
                typed = client.typed(exc, f"following the control stream of stream {stream_id}")
                if isinstance(typed, EndpointSecurityError):
                    raise typed from exc
                raise
            session = client.settled_session_of(stream_id)
            with self._lock:
                if self._cancelled or session == self._session:
                    return
                self._session = session
                self._call = client._open_control(stream_id, session)
