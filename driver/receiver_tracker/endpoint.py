"""LocalReceiverEndpoint: the driver's receiver-facing messages, callable in-process.

RegisterReceiver (accept or refuse, answering with the source positions the
driver acknowledged and the current rate limit), AddBlock (True only after the
tracker logged the block), ReportError and DeregisterReceiver. Unknown or
deregistered receivers are refused with a clear error, and so is anything over
:class:`~walstream.driver.receiver_tracker.endpoint_limits.EndpointLimits` (checked
before a block is logged or kept; Report strings are truncated before they are kept or logged).

Every accepted registration gets a new session token bound to its stream
(:mod:`walstream.rpc.auth`). A caller that passes ``session`` (the gRPC endpoint
always does, with what the call presented) must present the stream's current
token, else :class:`~walstream.driver.errors.SessionTokenError`; in-process callers pass
none. A stream bound with :meth:`LocalReceiverEndpoint.bind` takes only blocks of
its own WAL and declared source topics
(:class:`~walstream.driver.receiver_tracker.stream_binding.StreamBinding`).
A block's :class:`~walstream.receiver.block_info.BlockFigures` (the receiver's WAL write, the
source ends it knows) go, once the block is logged and with the values no real
receiver sends and the ends of other topics than a bound stream's left out, to the
``on_figures`` callback (the engine's metrics); they never decide the answer.
The gRPC
:class:`~walstream.driver.receiver_tracker.tracker.ReceiverTracker` serves the same messages to
receivers on executors.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from walstream.driver.errors import (
    NotLeaderError,
    ReportLimitError,
    SessionTokenError,
    UnknownReceiverError,
)
from walstream.driver.receiver_tracker.commands import CommandMailbox
from walstream.driver.receiver_tracker.endpoint_limits import EndpointLimits, escape_controls
from walstream.driver.receiver_tracker.stream_binding import StreamBinding
from walstream.driver.scheduler.listener import (
    ReceiverEvent,
    StreamingListenerReceiverError,
    StreamingListenerReceiverStarted,
    StreamingListenerReceiverStopped,
)
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.registration import Registration
from walstream.receiver.states import ReceiverState
from walstream.rpc.auth import new_session_token, same_token
from walstream.rpc.messages import MAX_SOURCE_ENDS

log = logging.getLogger(__name__)

#: Told (event type, stream id, detail) of every receiver event: the detail is the
#: executor id for a start, the message for an error or a stop.
Listener = Callable[[type[ReceiverEvent], int, str], None]
#: Told each logged block and the figures its receiver sent with it.
FiguresSink = Callable[[ReceivedBlockInfo, BlockFigures], None]

#: The figures kept: a WAL write of at most an hour and 2**40 bytes, offsets >= 0.
_MAX_WRITE_SECONDS = 3600.0
_MAX_WRITE_BYTES = 1 << 40


def sane_figures(figures: BlockFigures, topics: frozenset[str] | None) -> BlockFigures:
    """``figures`` without what no real receiver sends: a write time or size out of
    range becomes 0, and only ends of ``topics`` (None: any) at offsets >= 0, at
    most ``MAX_SOURCE_ENDS`` of them, are kept."""
    seconds = figures.wal_write_seconds
    if not (math.isfinite(seconds) and 0 <= seconds <= _MAX_WRITE_SECONDS):
        seconds = 0.0
    nbytes = figures.wal_bytes if 0 <= figures.wal_bytes <= _MAX_WRITE_BYTES else 0
    ends = tuple(e for e in figures.source_ends[:MAX_SOURCE_ENDS]
                 if e.partition >= 0 and e.end_offset >= 0
                 and (topics is None or e.topic in topics))
    return replace(figures, wal_write_seconds=seconds, wal_bytes=nbytes, source_ends=ends)


@dataclass
class ReceiverTrackingInfo:
    stream_id: int
    state: ReceiverState = ReceiverState.INACTIVE
    host: str = ""
    executor_id: str = ""
    launches: int = 0
    errors: list[str] = field(default_factory=list)
    rate_limit: float = 0.0
    scheduled_locations: list[str] = field(default_factory=list)
    # Coalesced, so that a burst of rate updates or cleanups never crowds out a STOP.
    commands: CommandMailbox = field(default_factory=CommandMailbox)
    # The current registration's token ("" before the first); a new registration
    # replaces it, a deregistration keeps it (the receiver's Control stream goes on).
    session: str = field(default="", repr=False)
    # The last sequence number of a command sent to this stream, in any session. It
    # never decreases, so the numbers each session's receiver sees increase strictly.
    command_seq: int = 0
    binding: StreamBinding | None = None


class LocalReceiverEndpoint:
    def __init__(self, block_tracker: ReceivedBlockTracker, stream_ids: list[int],
                 listener: Listener | None = None,
                 limits: EndpointLimits | None = None,
                 on_figures: FiguresSink | None = None) -> None:
        self.block_tracker = block_tracker
        self.on_figures = on_figures
        self.limits = limits or EndpointLimits()
        self.receivers = {s: ReceiverTrackingInfo(s) for s in stream_ids}
        self._lock = threading.Lock()
        self._listener = listener
        self._stopping = threading.Event()
        # Raises (a lease check) unless this driver
        # leads now; None: a driver without high availability always leads.
        self.leadership: Callable[[], None] | None = None
        # Seconds this driver is certain to keep leading (its lease's validity left);
        # None, or a callable answering None: no lease bounds it (no HA).
        self.leadership_validity: Callable[[], float | None] | None = None

    def _require_leadership(self, info: ReceivedBlockInfo, when: str) -> None:
        check = self.leadership
        if check is None:
            return
        try:
            check()
        except Exception as exc:
            raise NotLeaderError(f"block {info.block_id} of stream {info.stream_id} "
                                 f"refused {when}: this driver is not certain to lead "
                                 f"({exc}); report it to the next leader") from exc

    @property
    def tracker(self) -> ReceivedBlockTracker:
        return self.block_tracker

    def _emit(self, event: type[ReceiverEvent], stream_id: int, detail: str = "") -> None:
        if self._listener is not None:
            try:
                self._listener(event, stream_id, detail)
            except Exception:
                log.exception("receiver listener failed")

    def register_receiver(self, stream_id: int, host: str, executor_id: str) -> Registration:
        try:
            self.limits.check_name("the host", host)
            self.limits.check_name("the executor id", executor_id)
        except ReportLimitError as exc:
            return Registration(False, str(exc))
        # Kept, logged and shown (walstream status) escaped: a receiver's strings
        # are its own, not the driver's.
        host, executor_id = escape_controls(host), escape_controls(executor_id)
        with self._lock:
            info = self.receivers.get(stream_id)
            if self._stopping.is_set():
                return Registration(False, "the streaming context is stopping")
            if info is None:
                return Registration(
                    False, f"stream {stream_id} is not an input stream of this application")
            if info.state is ReceiverState.ACTIVE:
                return Registration(
                    False, f"a receiver for stream {stream_id} is already registered "
                    f"(on {info.executor_id})")
            info.state, info.host, info.executor_id = ReceiverState.ACTIVE, host, executor_id
            info.session = new_session_token()
            rate, session = info.rate_limit, info.session
        self._emit(StreamingListenerReceiverStarted, stream_id, executor_id)
        return Registration(True, "registered",
                            self.block_tracker.positions(stream_id), rate, session)

    def bind(self, binding: StreamBinding) -> None:
        """From now on, stream ``binding.stream_id`` takes only blocks ``binding`` allows."""
        with self._lock:
            self.receivers[binding.stream_id].binding = binding

    def _require_active(self, stream_id: int) -> None:
        info = self.receivers.get(stream_id)
        if info is None or info.state is not ReceiverState.ACTIVE:
            state = "unknown" if info is None else info.state
            raise UnknownReceiverError(
                f"receiver of stream {stream_id} is not registered ({state}); "
                "register it before reporting blocks")

    def _require_session(self, stream_id: int, session: str | None) -> None:
        """Raise :class:`SessionTokenError` unless ``session`` is None (an in-process
        caller) or ``stream_id``'s current token. The caller holds the lock."""
        if session is None:
            return
        info = self.receivers.get(stream_id)
        if info is not None and same_token(info.session, session):
            return
        owner = next((s for s, i in self.receivers.items() if same_token(i.session, session)),
                     None)
        if info is None:
            why = f"stream {stream_id} is not an input stream of this application"
        elif not session:
            why = "no session token presented: register first"
        elif owner is not None:
            why = f"the session token is stream {owner}'s"
        elif not info.session:
            why = f"stream {stream_id} has no registration yet: register first"
        else:
            why = ("the session token is not the stream's current one (a newer "
                   "registration superseded it, or it was never issued)")
        raise SessionTokenError(f"refused a call for stream {stream_id}: {why}")

    def check_session(self, stream_id: int, session: str) -> None:
        """:class:`SessionTokenError` unless ``session`` is ``stream_id``'s current token."""
        with self._lock:
            self._require_session(stream_id, session)

    def session_is_current(self, stream_id: int, session: str) -> bool:
        with self._lock:
            info = self.receivers.get(stream_id)
            return info is not None and same_token(info.session, session)

    def add_block(self, info: ReceivedBlockInfo, session: str | None = None,
                  figures: BlockFigures | None = None) -> bool:
        """True once the block is logged. :class:`NotLeaderError` when this driver is
        not certain to lead, before or after the log's acknowledgement (retriable:
        the source stays unacknowledged). Refused with nothing logged or kept:
        :class:`UnknownReceiverError` for a receiver that is not registered,
        :class:`SessionTokenError` for a ``session`` that is not its stream's
        current one, :class:`ReportLimitError` for a report over :attr:`limits`,
        :class:`~walstream.driver.errors.ForeignBlockError` for a WAL or source topic that is
        not its bound stream's. ``figures`` go to :attr:`on_figures` once the block
        is logged (:func:`sane_figures`)."""
        with self._lock:
            self._require_active(info.stream_id)
            self._require_session(info.stream_id, session)
            binding = self.receivers[info.stream_id].binding
        self.limits.check_block(info)
        if binding is not None:
            binding.check(info)
        self._require_leadership(info, "before logging")
        ok = self.block_tracker.add_block(info)
        if ok:
            # Checked again once the log acknowledged the block: leading now means the
            # block was logged before this driver's lease ran out, so before any new
            # leader could claim and cut the log; only then may the receiver
            # acknowledge its source. Otherwise it may lie past the cut, void.
            self._require_leadership(info, "after logging")
        if ok and figures is not None and self.on_figures is not None:
            try:
                self.on_figures(info, sane_figures(
                    figures, binding.source_topics if binding is not None else None))
            except Exception:
                log.exception("receiver %d: its figures could not be recorded", info.stream_id)
        return ok

    def may_clean(self, stream_id: int, thresh_time_ms: int,
                  session: str | None = None) -> float | None:
        """Grant ``stream_id``'s receiver a delete of its WAL's blocks older than
        ``thresh_time_ms`` now: the seconds this driver is certain to keep leading
        from now, or None when no lease bounds it (no HA). The receiver asks right
        before each destructive step of a clean (receiver/clean_guard.py), so a
        delete happens only while the lease is held, not merely when it was asked.

        Refused with :class:`NotLeaderError` when this driver is not certain to lead,
        or when it never asked for a clean up to ``thresh_time_ms`` (another leader's
        command, or none); :class:`UnknownReceiverError` and
        :class:`SessionTokenError` as for a block report."""
        with self._lock:
            self._require_session(stream_id, session)
            info = self.receivers.get(stream_id)
            if info is None:
                raise UnknownReceiverError(f"stream {stream_id} has no receiver here")
            asked = info.commands.cleanup_asked
        what = f"deleting stream {stream_id}'s blocks older than {thresh_time_ms}"
        if thresh_time_ms > asked:
            raise NotLeaderError(f"{what}: this driver asked for cleans below {asked} only")
        try:
            if self.leadership is not None:
                self.leadership()
            valid_s = self.leadership_validity() if self.leadership_validity else None
        except Exception as exc:
            raise NotLeaderError(f"{what}: this driver is not certain to lead ({exc})") from exc
        if valid_s is not None and valid_s <= 0:
            raise NotLeaderError(f"{what}: this driver's lease has run out")
        return valid_s

    def report_error(self, stream_id: int, message: str, error: str,
                     session: str | None = None) -> None:
        message, error = self.limits.truncate(message), self.limits.truncate(error)
        with self._lock:
            self._require_session(stream_id, session)
            info = self.receivers.get(stream_id)
            if info is not None:
                info.errors = [*info.errors[-99:], f"{message}: {error}"]
        log.warning("receiver %d reported: %s %s", stream_id, message, error)
        self._emit(StreamingListenerReceiverError, stream_id, f"{message}: {error}")

    def deregister_receiver(self, stream_id: int, message: str, error: str,
                            session: str | None = None) -> None:
        message, error = self.limits.truncate(message), self.limits.truncate(error)
        with self._lock:
            self._require_session(stream_id, session)
            info = self.receivers.get(stream_id)
            if info is not None and info.state is ReceiverState.ACTIVE:
                info.state = ReceiverState.DEREGISTERED
        log.info("receiver %d deregistered: %s %s", stream_id, message, error)
        self._emit(StreamingListenerReceiverStopped, stream_id, message)
