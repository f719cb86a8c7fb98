"""LocalReceiverEndpoint: the driver's receiver-facing messages, callable in-process.

RegisterReceiver (accept or refuse, answering with the source positions the
driver acknowledged and the current rate limit), AddBlock (True only after the
tracker logged the block), ReportError and DeregisterReceiver. Unknown or
deregistered receivers are refused with a clear error. The gRPC
:class:`~driver.receiver_tracker.ReceiverTracker` serves the same messages to
receivers on executors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from driver.errors import UnknownReceiverError
from driver.received_block_tracker import ReceivedBlockTracker
from driver.receiver_commands import CommandMailbox
from receiver.block_info import ReceivedBlockInfo
from receiver.registration import Registration

log = logging.getLogger(__name__)

Listener = Callable[[str, int, str], None]  # (event, stream id, detail)


@dataclass
class ReceiverTrackingInfo:
    stream_id: int
    state: str = "inactive"  # inactive | scheduled | active | deregistered | failed
    host: str = ""
    executor_id: str = ""
    launches: int = 0
    errors: list[str] = field(default_factory=list)
    rate_limit: float = 0.0
    scheduled_locations: list[str] = field(default_factory=list)
    # Coalesced, so that a burst of rate updates or cleanups never crowds out a STOP.
    commands: CommandMailbox = field(default_factory=CommandMailbox)


class LocalReceiverEndpoint:
    def __init__(self, block_tracker: ReceivedBlockTracker, stream_ids: list[int],
                 listener: Listener | None = None) -> None:
        self.block_tracker = block_tracker
        self.receivers = {s: ReceiverTrackingInfo(s) for s in stream_ids}
        self._lock = threading.Lock()
        self._listener = listener
        self._stopping = threading.Event()

    @property
    def tracker(self) -> ReceivedBlockTracker:
        return self.block_tracker

    def _emit(self, event: str, stream_id: int, detail: str = "") -> None:
        if self._listener is not None:
            try:
                self._listener(event, stream_id, detail)
            except Exception:
                log.exception("receiver listener failed")

    def register_receiver(self, stream_id: int, host: str, executor_id: str) -> Registration:
        with self._lock:
            info = self.receivers.get(stream_id)
            if self._stopping.is_set():
                return Registration(False, "the streaming context is stopping")
            if info is None:
                return Registration(
                    False, f"stream {stream_id} is not an input stream of this application")
            if info.state == "active":
                return Registration(
                    False, f"a receiver for stream {stream_id} is already registered "
                    f"(on {info.executor_id})")
            info.state, info.host, info.executor_id = "active", host, executor_id
            rate = info.rate_limit
        self._emit("receiver_started", stream_id, executor_id)
        return Registration(True, "registered",
                            self.block_tracker.positions(stream_id), rate)

    def _require_active(self, stream_id: int) -> None:
        info = self.receivers.get(stream_id)
        if info is None or info.state != "active":
            state = "unknown" if info is None else info.state
            raise UnknownReceiverError(
                f"receiver of stream {stream_id} is not registered ({state}); "
                "register it before reporting blocks")

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        with self._lock:
            self._require_active(info.stream_id)
        return self.block_tracker.add_block(info)

    def report_error(self, stream_id: int, message: str, error: str) -> None:
        with self._lock:
            info = self.receivers.get(stream_id)
            if info is not None:
                info.errors = [*info.errors[-99:], f"{message}: {error}"]
        log.warning("receiver %d reported: %s %s", stream_id, message, error)
        self._emit("receiver_error", stream_id, f"{message}: {error}")

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None:
        with self._lock:
            info = self.receivers.get(stream_id)
            if info is not None and info.state == "active":
                info.state = "deregistered"
        log.info("receiver %d deregistered: %s %s", stream_id, message, error)
        self._emit("receiver_stopped", stream_id, message)
