"""ReceiverTracker: the driver's RPC endpoint for receivers, and their launcher.

Messages (gRPC, Avro bodies, see :mod:`driver.rpc_messages`): RegisterReceiver
(accept or refuse, with the source positions the driver has acknowledged),
AddBlock (answered True only after the tracker logged the block), Report
(errors and deregistration) and a Control stream carrying StopReceiver,
CleanupOldBlocks and UpdateRateLimit to the receiver (coalesced per receiver,
see :class:`~driver.receiver_commands.CommandMailbox`: never dropped). Local API:
``start_all_receivers``, ``restart_receiver``, ``all_receiver_ids``,
``stop_all_receivers``.

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
from typing import Any

import grpc

from driver import rpc_messages as m
from driver.errors import UnknownReceiverError
from driver.received_block_tracker import ReceivedBlockTracker
from driver.receiver_endpoint import Listener, LocalReceiverEndpoint
from driver.receiver_scheduling import (
    ExecutorLocation,
    executors_of,
    located_single_partition_rdd,
    reschedule_receiver,
)
from receiver.block_info import ReceivedBlockInfo
from receiver.task import ReceiverTaskSpec, run_receiver_task

log = logging.getLogger(__name__)




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
        host: str = "127.0.0.1",
        port: int = 0,
        max_workers: int = 32,
        listener: Listener | None = None,
    ) -> None:
        super().__init__(block_tracker, stream_ids, listener)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        handlers = {
            "RegisterReceiver": grpc.unary_unary_rpc_method_handler(
                self._rpc_register, m.decode(m.REGISTER_REQUEST), m.encode(m.REGISTER_RESPONSE)),
            "AddBlock": grpc.unary_unary_rpc_method_handler(
                self._rpc_add_block, m.decode(m.ADD_BLOCK_REQUEST), m.encode(m.ADD_BLOCK_RESPONSE)),
            "Report": grpc.unary_unary_rpc_method_handler(
                self._rpc_report, m.decode(m.REPORT_REQUEST), m.encode(m.EMPTY)),
            "Control": grpc.unary_stream_rpc_method_handler(
                self._rpc_control, m.decode(m.CONTROL_REQUEST), m.encode(m.COMMAND)),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(m.SERVICE, handlers),))
        bound = self._server.add_insecure_port(f"{host}:{port}")
        if bound == 0:
            raise OSError(f"ReceiverTracker cannot bind {host}:{port}")
        self.address = f"{host}:{bound}"
        self._threads: dict[int, threading.Thread] = {}
        self._placed: dict[int, ExecutorLocation | None] = {}
        self._server.start()

    # -- gRPC adapters ------------------------------------------------------------

    def _rpc_register(self, req: dict[str, Any], ctx: grpc.ServicerContext) -> dict[str, Any]:
        r = self.register_receiver(req["stream_id"], req["host"], req["executor_id"])
        return {"accepted": r.accepted, "message": r.message,
                "positions": [p.to_dict() for p in r.positions], "rate_limit": r.rate_limit}

    def _rpc_add_block(self, req: dict[str, Any], ctx: grpc.ServicerContext) -> dict[str, Any]:
        info = ReceivedBlockInfo.from_dict(req["block"])
        try:
            ok = self.add_block(info)
        except UnknownReceiverError as exc:
            return {"ok": False, "message": str(exc)}
        return {"ok": ok, "message": "" if ok else "the driver could not log the block"}

    def _rpc_report(self, req: dict[str, Any], ctx: grpc.ServicerContext) -> dict[str, Any]:
        if req["kind"] == "DEREGISTER":
            self.deregister_receiver(req["stream_id"], req["message"], req["error"])
        else:
            self.report_error(req["stream_id"], req["message"], req["error"])
        return {}

    def _rpc_control(self, req: dict[str, Any], ctx: grpc.ServicerContext) -> Iterator[
        dict[str, Any]
    ]:
        info = self.receivers.get(req["stream_id"])
        if info is None:
            return
        while ctx.is_active():
            cmd = info.commands.take(timeout_s=1.0)
            if cmd is None:
                if self._stopping.is_set() and info.state != "active":
                    return
                cmd = {"kind": "HEARTBEAT"}
            yield cmd
            if cmd["kind"] == "STOP":
                return

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
                info.state, info.launches = "scheduled", info.launches + 1
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
                rdd = located_single_partition_rdd(sc, locations).mapPartitions(
                    lambda it, spec=spec: run_receiver_task(spec, it))
                status = rdd.collect()[0]
            except Exception as exc:
                status = f"failed: {str(exc).splitlines()[0][:300]}"
            with self._lock:
                if info.state in ("active", "scheduled"):
                    info.state = "inactive"
            if self._stopping.is_set():
                return
            failures = 0 if status == "stopped" else failures + 1
            log.warning("receiver %d ended (%s); relaunching in %.1fs", spec.stream_id,
                        status, delay_s)
            self._emit("receiver_error", spec.stream_id, f"receiver job ended: {status}")
            if failures > max_relaunches:
                with self._lock:
                    info.state = "failed"
                    info.errors.append(f"gave up after {max_relaunches} relaunches")
                return
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
        self._server.stop(grace=2).wait(5)
