"""Running a receiver as a long-running Spark task (what the driver's launcher submits).

The task registers with the driver over gRPC, runs the supervisor, follows the
driver's control stream (stop, cleanup, rate updates) and returns when the
receiver stops. Spark must not retry it on its own (the tracker decides about
relaunches, with fresh start positions), so an attempt number above 0 returns at
once with ``retry-refused``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.errors import EndpointSecurityError
from walstream.receiver.receiver import Receiver
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.rpc.auth import EndpointCredentials, local_credentials

if TYPE_CHECKING:
    from walstream.receiver.clean_guard import CleanGuard
    from walstream.receiver.driver_client import DriverClient
    from walstream.wal.kafka_log import KafkaWriteAheadLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceiverTaskSpec:
    """Everything a receiver task needs; pickled into the Spark job's closure.

    ``credentials``: the keys that authenticate this receiver to the driver's
    endpoint and the driver to it, and the endpoint's trusted TLS certificates
    (:mod:`walstream.rpc.auth`); never in ``repr``. Left out, they are those of the
    endpoint serving ``driver_address`` in the process building the spec (none
    when no endpoint there does: the endpoint then refuses the receiver).
    """

    stream_id: int
    receiver: Receiver
    driver_address: str
    bootstrap_servers: str
    wal_name: str
    generator_config: BlockGeneratorConfig = field(default_factory=BlockGeneratorConfig)
    supervisor_config: SupervisorConfig = field(default_factory=SupervisorConfig)
    # Its ``client_config`` is the application's Kafka settings, secrets included.
    wal_options: dict[str, Any] = field(default_factory=dict, repr=False)
    credentials: EndpointCredentials | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Runs where the spec is built (the driver), not where it is unpickled.
        if self.credentials is None:
            object.__setattr__(self, "credentials", local_credentials(self.driver_address))


def executor_id() -> str:
    """Where we run: ``host:worker-daemon-pid:worker-pid``.

    The daemon pid identifies the executor's Python side (one per executor);
    the worker pid is the process that runs this receiver (chaos tests kill it).
    """
    return f"{socket.gethostname()}:{os.getppid()}:{os.getpid()}"


def receiver_wal(spec: ReceiverTaskSpec,
                 client: DriverClient) -> tuple[KafkaWriteAheadLog, CleanGuard]:
    """The receiver's Kafka WAL and its :class:`~walstream.receiver.clean_guard.CleanGuard`: each
    delete of the WAL's data first asks ``client``'s driver, so it happens only while
    that driver is certain to lead."""
    from walstream.receiver.clean_guard import CleanGuard
    from walstream.wal.kafka_log import KafkaWriteAheadLog

    guard = CleanGuard(client, spec.stream_id)
    wal = KafkaWriteAheadLog(spec.bootstrap_servers, spec.wal_name, delete_guard=guard,
                             **spec.wal_options)
    return wal, guard


def run_receiver_task(spec: ReceiverTaskSpec, _: Iterator[Any]) -> Iterator[str]:
    from pyspark import TaskContext

    from walstream.receiver.driver_client import DriverClient
    from walstream.receiver.supervisor import ReceiverSupervisor

    ctx = TaskContext.get()
    if ctx is not None and ctx.attemptNumber() > 0:
        yield "retry-refused"  # the tracker, not Spark, relaunches receivers
        return
    client = DriverClient(spec.driver_address, spec.supervisor_config.report_timeout_s,
                          spec.credentials)
    # The application's Kafka settings reach the receiver's own clients too.
    spec.receiver._use_kafka_settings(spec.wal_options.get("client_config", {}))
    wal, guard = receiver_wal(spec, client)
    sup = ReceiverSupervisor(spec.receiver, spec.stream_id, wal, client,
                             spec.generator_config, spec.supervisor_config, executor_id())
    status = "stopped"
    try:
        sup.start()
        follower = threading.Thread(target=_follow_control, args=(client, sup, guard),
                                    daemon=True)
        follower.start()
        sup.await_termination()
        if sup.error is not None:
            status = f"failed: {sup.error}"
    finally:
        sup.stop("receiver task ending", None)
        wal.close()
        client.close()
    yield status


def _follow_control(client: Any, sup: Any, guard: CleanGuard) -> None:
    """Act on the driver's commands; the client yields only those the driver signed. A
    clean asks the driver again right before it deletes (``guard``, a CleanGuard)."""
    try:
        for cmd in client.control(sup.stream_id):
            kind = cmd["kind"]
            if kind == "STOP":
                threading.Thread(target=sup.stop, args=(cmd["message"], None),
                                 daemon=True).start()
                return
            if kind == "CLEANUP_OLD_BLOCKS":
                guard.asked(int(cmd["thresh_time_ms"]))
                sup.wal.clean(int(cmd["thresh_time_ms"]), False)
            elif kind == "UPDATE_RATE_LIMIT":
                sup.generator.update_rate(float(cmd["rate_limit"]))
    except EndpointSecurityError as exc:
        if not sup.stopped.is_set():
            log.error("stream %d: the control stream was refused: %s", sup.stream_id, exc)
            sup.stop("the driver endpoint refused the control stream", exc)
    except Exception as exc:
        if not sup.stopped.is_set():
            # The driver went away: stop, so the tracker of a restarted driver
            # relaunches us from its own acknowledged positions.
            log.error("stream %d: lost the driver's control stream: %s", sup.stream_id, exc)
            sup.stop("driver unreachable", exc)
