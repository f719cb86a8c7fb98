"""ReceiverTracker: the driver's RPC endpoint for receivers, and their launcher.

Messages (gRPC, Avro bodies, see :mod:`walstream.rpc.messages`): RegisterReceiver
(accept or refuse, with the source positions the driver has acknowledged),
AddBlock (answered True only after the tracker logged the block; it carries the
receiver's figures, handed to ``on_figures``), Report
(errors and deregistration) and a Control stream carrying StopReceiver,
CleanupOldBlocks and UpdateRateLimit to the receiver (coalesced per receiver,
see :class:`~walstream.driver.receiver_tracker.commands.CommandMailbox`: never dropped). Local API:
``start_all_receivers``, ``restart_receiver``, ``all_receiver_ids``,
``stop_all_receivers``.

Security (:mod:`walstream.rpc.auth`): every call must present the application's
call token
(:class:`~walstream.driver.receiver_tracker.endpoint_auth.CallAuthInterceptor`,
UNAUTHENTICATED otherwise); AddBlock, Report and Control must present their stream's current
session token (PERMISSION_DENIED otherwise); a launched stream takes only blocks
of its own WAL and source topics
(:class:`~walstream.driver.receiver_tracker.stream_binding.StreamBinding`,
PERMISSION_DENIED otherwise); the registration answer, every AddBlock answer and
every command carry the driver key's MAC. With
:class:`~walstream.driver.receiver_tracker.endpoint_conf.EndpointTls` the endpoint serves TLS only.

Receivers run as long-running single-task Spark jobs, one per receiver, each on
its own driver thread. When a job ends while the tracker is running (the worker
died, the receiver failed), the tracker relaunches it after ``relaunch_delay_s``
with the positions the driver acknowledged, at most ``max_relaunches`` times in
a row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc

from walstream.driver.errors import (
    NotLeaderError,
    ReceiverPermissionError,
    ReportLimitError,
    UnknownReceiverError,
)
from walstream.driver.receiver_tracker.endpoint import FiguresSink, Listener, LocalReceiverEndpoint
from walstream.driver.receiver_tracker.endpoint_auth import CallAuthInterceptor
from walstream.driver.receiver_tracker.endpoint_conf import LOOPBACK, EndpointTls, host_port
from walstream.driver.receiver_tracker.endpoint_limits import EndpointLimits
from walstream.driver.receiver_tracker.scheduling import (
    ExecutorLocation,
    executors_of,
    located_single_partition_rdd,
    reschedule_receiver,
)
from walstream.driver.receiver_tracker.stream_binding import StreamBinding
from walstream.driver.scheduler.listener import StreamingListenerReceiverError
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.errors import ConfigError, CorruptDataError
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.states import ReceiverState
from walstream.receiver.task import ReceiverTaskSpec, run_receiver_task
from walstream.rpc import auth
from walstream.rpc import messages as m

log = logging.getLogger(__name__)

#: HTTP/2 streams one connection may hold open at once, and how long a connection
#: may take to complete its handshake (TLS included) before it is closed.
MAX_STREAMS_PER_CONNECTION = 64
HANDSHAKE_TIMEOUT_MS = 10_000


def _location_of(locations: list[str]) -> ExecutorLocation | None:
    """The executor named by ``executor_<host>_<id>``, if that is what was chosen."""
    if not locations or not locations[0].startswith("executor_"):
        return None
    host, _, executor_id = locations[0][len("executor_"):].rpartition("_")
    return ExecutorLocation(host, executor_id)


class ReceiverTracker(LocalReceiverEndpoint):
    def __init__(
        self,
        block_tracker: ReceivedBlockTracker,
        stream_ids: list[int],
        host: str = LOOPBACK,
        port: int = 0,
        max_workers: int | None = None,
        listener: Listener | None = None,
        limits: EndpointLimits | None = None,
        advertised_host: str | None = None,
        credentials: auth.EndpointCredentials | None = None,
        tls: EndpointTls | None = None,
        on_figures: FiguresSink | None = None,
    ) -> None:
        """Listens on ``host:port`` (port 0: any free one); receivers are told
        ``advertised_host`` (default ``host``) and the bound port, as ``address``.
        ``credentials``: the application's keys (default: generated); with ``tls``
        the endpoint serves TLS only. :attr:`credentials` is what receivers need
        (with ``tls``'s trusted certificates), published for this process under
        :attr:`address` (:func:`~walstream.rpc.auth.local_credentials`) while the
        endpoint runs.
        ``max_workers``: threads for the unary calls (default
        ``limits.unary_workers``); the pool has two more per input stream for the
        Control streams, and at most ``maximum_concurrent_rpcs`` calls run or wait
        (more are refused with RESOURCE_EXHAUSTED, which a receiver retries)."""
        super().__init__(block_tracker, stream_ids, listener, limits, on_figures)
        unary = self.limits.unary_workers if max_workers is None else max_workers
        if unary < 1:
            raise ConfigError("ReceiverTracker: max_workers must be >= 1")
        # A Control stream holds its thread for the receiver's life; a relaunched
        # receiver's stream may overlap the one it supersedes for a moment.
        self.max_workers = 2 * len(self.receivers) + unary
        # Unary calls may queue as deep as their pool; beyond that, refuse at once.
        self.maximum_concurrent_rpcs = self.max_workers + unary
        self.server_options = [
            ("grpc.max_receive_message_length", self.limits.max_message_bytes),
            ("grpc.max_send_message_length", self.limits.max_message_bytes),
            # Per connection: a receiver needs its Control stream and one call at a
            # time. Unauthenticated calls are refused before they hold anything
            # (driver/receiver_tracker/endpoint_auth.py); these bound what one connection can open,
            # and how long one that never finishes its handshake stays.
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
            ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
        ]
        self.credentials = (credentials or auth.EndpointCredentials.generate()).with_tls_root(
            tls.trust_pem if tls is not None else None)
        self.auth = CallAuthInterceptor(self.credentials.call_token)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="rpc"),
            options=self.server_options,
            maximum_concurrent_rpcs=self.maximum_concurrent_rpcs,
            interceptors=(self.auth,),
        )
        add_block_request = m.ADD_BLOCK_REQUEST.with_bounds(
            self.limits.add_block_bounds(), self.limits.max_message_bytes)
        handlers = {
            "RegisterReceiver": grpc.unary_unary_rpc_method_handler(
                self._rpc_register, m.decode_request(m.REGISTER_REQUEST),
                m.encode(m.REGISTER_RESPONSE)),
            "AddBlock": grpc.unary_unary_rpc_method_handler(
                self._rpc_add_block, m.decode_request(add_block_request),
                m.encode(m.ADD_BLOCK_RESPONSE)),
            "Report": grpc.unary_unary_rpc_method_handler(
                self._rpc_report, m.decode_request(m.REPORT_REQUEST), m.encode(m.EMPTY)),
            "MayClean": grpc.unary_unary_rpc_method_handler(
                self._rpc_may_clean, m.decode_request(m.CLEAN_GRANT_REQUEST),
                m.encode(m.CLEAN_GRANT_RESPONSE)),
            "Control": grpc.unary_stream_rpc_method_handler(
                self._rpc_control, m.decode_request(m.CONTROL_REQUEST), m.encode(m.COMMAND)),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(m.SERVICE, handlers),))
        if tls is None:
            bound = self._server.add_insecure_port(host_port(host, port))
        else:
            try:
                bound = self._server.add_secure_port(
                    host_port(host, port), grpc.ssl_server_credentials([(tls.key_pem,
                                                                         tls.cert_pem)]))
            except RuntimeError as exc:  # the port, or gRPC refusing the key material
                raise OSError(f"ReceiverTracker cannot serve TLS on {host_port(host, port)}: "
                              f"{exc}") from None
        if bound == 0:
            raise OSError(f"ReceiverTracker cannot bind {host_port(host, port)}")
        self.address = host_port(advertised_host or host, bound)
        self.tls = tls is not None
        self._threads: dict[int, threading.Thread] = {}
        self._placed: dict[int, ExecutorLocation | None] = {}
        self._server.start()
        auth.publish_local(self.address, self.credentials)

    # -- gRPC adapters ------------------------------------------------------------

    @staticmethod
    def _refuse(req: dict[str, Any] | m.BadRequest, ctx: grpc.ServicerContext) -> dict[str, Any]:
        """The decoded request; a refused body ends the call with INVALID_ARGUMENT."""
        if isinstance(req, m.BadRequest):
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, req.message[:1000])
        assert isinstance(req, dict)
        return req

    @staticmethod
    def _deny(ctx: grpc.ServicerContext, exc: ReceiverPermissionError) -> NoReturn:
        ctx.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc)[:1000])
        raise AssertionError("unreachable: abort raises")

    def _rpc_register(self, body: dict[str, Any] | m.BadRequest,
                      ctx: grpc.ServicerContext) -> dict[str, Any]:
        req = self._refuse(body, ctx)
        nonce = req["nonce"]
        if not auth.MIN_NONCE_BYTES <= len(nonce) <= auth.MAX_NONCE_BYTES:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"a registration nonce of {len(nonce)} bytes (want "
                      f"{auth.MIN_NONCE_BYTES}..{auth.MAX_NONCE_BYTES})")
        r = self.register_receiver(req["stream_id"], req["host"], req["executor_id"])
        if r.accepted:
            log.info("receiver %d started on %s (executor %s)", req["stream_id"],
                     req["host"], req["executor_id"])
        else:
            log.warning("receiver %d refused a registration from %s: %s", req["stream_id"],
                        req["host"], r.message)
        answer = {"accepted": r.accepted, "message": r.message,
                  "positions": [p.to_dict() for p in r.positions], "rate_limit": r.rate_limit,
                  "session": r.session}
        return auth.sign_registration(self.credentials.driver_key, req["stream_id"], nonce,
                                      answer)

    def _rpc_add_block(self, req: dict[str, Any] | m.BadRequest,
                       ctx: grpc.ServicerContext) -> dict[str, Any]:
        if isinstance(req, m.BadRequest):
            # Unsigned: a receiver acts only on a signed acceptance, never on a refusal.
            return {"ok": False, "message": f"block report refused: {req.message}"[:1000],
                    "proof": b""}
        block = req["block"]
        figures = req.get("figures")
        try:
            ok = self.add_block(ReceivedBlockInfo.from_dict(block), session=req["session"],
                                figures=BlockFigures.from_dict(figures) if figures else None)
            message = "" if ok else "the driver could not log the block"
        except ReceiverPermissionError as exc:
            self._deny(ctx, exc)
        except (UnknownReceiverError, ReportLimitError, CorruptDataError,
                NotLeaderError) as exc:
            ok, message = False, str(exc)[:1000]
        return auth.sign_add_block(self.credentials.driver_key, block["stream_id"],
                                   req["session"], block["block_id"],
                                   {"ok": ok, "message": message})

    def _rpc_may_clean(self, body: dict[str, Any] | m.BadRequest,
                       ctx: grpc.ServicerContext) -> dict[str, Any]:
        req = self._refuse(body, ctx)
        stream_id, session, thresh = req["stream_id"], req["session"], req["thresh_time_ms"]
        try:
            valid_s = self.may_clean(stream_id, thresh, session=session)
            answer = {"granted": True, "message": "",
                      # 0 means unbounded: a bounded validity is at least 1 ms.
                      "valid_ms": 0 if valid_s is None else max(1, int(valid_s * 1000))}
        except ReceiverPermissionError as exc:
            self._deny(ctx, exc)
        except (UnknownReceiverError, NotLeaderError) as exc:
            answer = {"granted": False, "message": str(exc)[:1000], "valid_ms": 0}
        return auth.sign_clean_grant(self.credentials.driver_key, stream_id, session, thresh,
                                     req["nonce"], answer)

    def _rpc_report(self, body: dict[str, Any] | m.BadRequest,
                    ctx: grpc.ServicerContext) -> dict[str, Any]:
        req = self._refuse(body, ctx)
        try:
            if req["kind"] == "DEREGISTER":
                self.deregister_receiver(req["stream_id"], req["message"], req["error"],
                                         session=req["session"])
            else:
                self.report_error(req["stream_id"], req["message"], req["error"],
                                  session=req["session"])
        except ReceiverPermissionError as exc:
            self._deny(ctx, exc)
        return {}

    def _rpc_control(self, body: dict[str, Any] | m.BadRequest,
                     ctx: grpc.ServicerContext) -> Iterator[dict[str, Any]]:
        req = self._refuse(body, ctx)
        stream_id, session = req["stream_id"], req["session"]
        try:
            self.check_session(stream_id, session)
        except ReceiverPermissionError as exc:
            self._deny(ctx, exc)
        info = self.receivers[stream_id]
        # The latest Control stream of a receiver supersedes the earlier one, which
        # ends at once: one receiver holds at most one server thread here.
        stream = info.commands.open_stream()
        while ctx.is_active():
            if not self.session_is_current(stream_id, session):
                # A newer registration superseded this session: its holder follows
                # the stream it opens with the new token.
                return
            cmd = info.commands.take(timeout_s=1.0, stream=stream)
            if cmd is None:
                if not info.commands.is_current(stream):
                    return
                if self._stopping.is_set() and info.state is not ReceiverState.ACTIVE:
                    return
                cmd = {"kind": "HEARTBEAT"}
            yield self._signed(stream_id, session, cmd)
            if cmd["kind"] == "STOP":
                return

    def _signed(self, stream_id: int, session: str, cmd: dict[str, Any]) -> dict[str, Any]:
        """``cmd`` as the next command of ``session``, with the driver key's MAC. A
        command taken just as a newer registration superseded the session is still
        signed for the session that took it: the receiver holding that session
        checks it, so it is never dropped on the way."""
        info = self.receivers[stream_id]
        with self._lock:
            info.command_seq += 1
            seq = info.command_seq
        return auth.sign_command(self.credentials.driver_key, stream_id, session, seq, cmd)

    # -- driver-to-receiver messages ---------------------------------------------------

    def cleanup_old_blocks(self, thresh_time_ms: int) -> None:
        for s in self.all_receiver_ids():
            self.receivers[s].commands.cleanup(thresh_time_ms)

    def update_rate_limit(self, stream_id: int, rate: float) -> None:
        self.receivers[stream_id].rate_limit = rate
        self.receivers[stream_id].commands.update_rate(rate)

    def all_receiver_ids(self) -> list[int]:
        return sorted(self.receivers)

    # -- launching receivers as Spark jobs -------------------------------------------

    def start_all_receivers(self, sc: Any, specs: list[ReceiverTaskSpec],
                            relaunch_delay_s: float = 1.0, max_relaunches: int = 100) -> None:
        """Launch one Spark job per spec. Each stream is first bound to its spec's WAL
        and its receiver's declared source topics (:class:`StreamBinding`)."""
        for spec in specs:
            self.bind(StreamBinding.of_spec(spec))
        for spec in specs:
            t = threading.Thread(target=self._run_receiver_job,
                                 args=(sc, spec, relaunch_delay_s, max_relaunches),
                                 name=f"receiver-job-{spec.stream_id}", daemon=True)
            self._threads[spec.stream_id] = t
            t.start()

    def _run_receiver_job(self, sc: Any, spec: ReceiverTaskSpec, delay_s: float,
                          max_relaunches: int) -> None:
        failures = 0
        info = self.receivers[spec.stream_id]
        while not self._stopping.is_set():
            with self._lock:
                info.state, info.launches = ReceiverState.SCHEDULED, info.launches + 1
            group = f"walstream-receiver-{spec.stream_id}-{info.launches}"
            status = "failed"
            try:
                # Place it: the preferred host, else the least loaded live executor.
                locations = reschedule_receiver(
                    spec.receiver.preferredLocation, executors_of(sc),
                    {s: self._placed.get(s) for s in self.receivers if s != spec.stream_id})
                with self._lock:
                    info.scheduled_locations = locations
                    self._placed[spec.stream_id] = _location_of(locations)
                sc.setJobGroup(group, f"receiver for stream {spec.stream_id}", True)
                log.debug("receiver %d launched (launch %d) on %s", spec.stream_id,
                          info.launches, locations or "any executor")
                rdd = located_single_partition_rdd(sc, locations).mapPartitions(
                    lambda it, spec=spec: run_receiver_task(spec, it))
                status = rdd.collect()[0]
            except Exception as exc:
                status = f"failed: {str(exc).splitlines()[0][:300]}"
            with self._lock:
                if info.state in (ReceiverState.ACTIVE, ReceiverState.SCHEDULED):
                    info.state = ReceiverState.INACTIVE
            if self._stopping.is_set():
                # The context stops it: the receiver's deregistration was its line.
                log.debug("receiver %d job ended (%s)", spec.stream_id, status)
                return
            failures = 0 if status == "stopped" else failures + 1
            self._emit(StreamingListenerReceiverError, spec.stream_id,
                       f"receiver job ended: {status}")
            if failures > max_relaunches:
                with self._lock:
                    info.state = ReceiverState.FAILED
                    info.errors.append(f"gave up after {max_relaunches} relaunches")
                log.error("receiver %d ended (%s) %d times in a row; not relaunched, its "
                          "stream receives nothing more", spec.stream_id, status, failures)
                return
            if failures:
                log.warning("receiver %d ended (%s); relaunching in %.1f s (failure %d in a "
                            "row, at most %d)", spec.stream_id, status, delay_s, failures,
                            max_relaunches)
            else:
                log.info("receiver %d stopped without an error; relaunching in %.1f s",
                         spec.stream_id, delay_s)
            if self._stopping.wait(delay_s):
                return

    def restart_receiver(self, stream_id: int) -> None:
        """Ask a receiver to stop; its launcher thread relaunches it."""
        self.receivers[stream_id].commands.stop("restart requested by the driver")

    def stop_all_receivers(self, timeout_s: float = 60.0) -> None:
        """Stop every receiver (each flushes its last blocks), then the endpoint."""
        self._stopping.set()
        for s in self.all_receiver_ids():
            self.receivers[s].commands.stop("the streaming context is stopping")
        deadline = time.monotonic() + timeout_s
        for t in self._threads.values():
            t.join(max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stopping.set()
        auth.withdraw_local(self.address, self.credentials)
        self._server.stop(grace=2).wait(5)
