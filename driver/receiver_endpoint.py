"""LocalReceiverEndpoint: the driver's receiver-facing messages, called in-process.

It answers RegisterReceiver, AddBlock, ReportError and DeregisterReceiver for
receivers running in the driver process. AddBlock answers True only after the
tracker logged the block in the driver WAL. The gRPC ReceiverTracker endpoint
for receivers on executors serves the same messages over the network.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from driver.errors import UnknownReceiverError
from driver.received_block_tracker import ReceivedBlockTracker
from receiver.block_info import ReceivedBlockInfo

log = logging.getLogger(__name__)


@dataclass
class ReceiverInfo:
    stream_id: int
    state: str = "inactive"  # inactive | active | deregistered
    host: str = ""
    executor_id: str = ""
    errors: list[str] = field(default_factory=list)


class LocalReceiverEndpoint:
    def __init__(self, tracker: ReceivedBlockTracker, stream_ids: list[int]) -> None:
        self.tracker = tracker
        self._lock = threading.Lock()
        self.receivers = {s: ReceiverInfo(s) for s in stream_ids}

    def register_receiver(self, stream_id: int, host: str, executor_id: str) -> tuple[bool, str]:
        with self._lock:
            info = self.receivers.get(stream_id)
            if info is None:
                return False, f"stream {stream_id} is not an input stream of this application"
            if info.state == "active":
                return False, f"a receiver for stream {stream_id} is already registered"
            info.state, info.host, info.executor_id = "active", host, executor_id
            return True, "registered"

    def _require_active(self, stream_id: int) -> None:
        info = self.receivers.get(stream_id)
        if info is None or info.state != "active":
            state = "unknown" if info is None else info.state
            raise UnknownReceiverError(
                f"receiver of stream {stream_id} is not registered ({state}); "
                "register it before reporting blocks"
            )

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        with self._lock:
            self._require_active(info.stream_id)
        return self.tracker.add_block(info)

    def report_error(self, stream_id: int, message: str, error: str) -> None:
        with self._lock:
            info = self.receivers.get(stream_id)
            if info is not None:
                info.errors.append(f"{message}: {error}")
        log.warning("receiver %d reported: %s %s", stream_id, message, error)

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None:
        with self._lock:
            info = self.receivers.get(stream_id)
            if info is not None:
                info.state = "deregistered"
        log.info("receiver %d deregistered: %s %s", stream_id, message, error)
